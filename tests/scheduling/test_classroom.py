"""Start all / Stop all for a class, and the live class over Channels."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from zoneinfo import ZoneInfo

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.test import Client
from django.utils import timezone
from guardian.shortcuts import assign_perm

from people.models import Course, Member
from portal.live.class_consumers import ClassConsumer
from scheduling.choices import TERMINAL_STATES, AuditKind, Purpose, SessionState
from scheduling.models import AuditEvent, Booking, Session, default_profile_of, set_default_profile
from scheduling.services import ServiceError
from scheduling.services.classroom import (
    class_sessions,
    do_start_all,
    do_stop_all,
    do_stop_class_session,
)
from scheduling.services.sessions import MAX_OPEN_SESSIONS_PER_USER

SHANGHAI = ZoneInfo("Asia/Shanghai")


@pytest.fixture
def teacher(make_user):
    return make_user("prof", first_name="Grace", last_name="Hopper")


@pytest.fixture
def students(make_user):
    return [make_user(f"s{i}") for i in range(1, 5)]


@pytest.fixture
def course(teacher, students, profile):
    course = Course.objects.create(code="cs101", title="Intro")
    set_default_profile(course, profile)
    course.instructors.add(teacher)
    course.students.add(*students)
    return course


def open_sessions(course):
    return Session.objects.filter(course=course).exclude(state__in=TERMINAL_STATES)


@pytest.mark.django_db
def test_start_all_asks_one_desktop_for_each_student_lacking_one(teacher, course, students):
    s1 = students[0]
    Session.objects.create(
        user=s1, profile=default_profile_of(course), purpose=Purpose.COURSEWORK, course=course
    )
    result = do_start_all(teacher, course)

    assert (result.started, result.already_open, result.skipped_at_limit) == (3, 1, 0)
    assert sorted(open_sessions(course).values_list("user__username", flat=True)) == [
        "s1",
        "s2",
        "s3",
        "s4",
    ]
    started = Session.objects.get(pk=result.session_ids[0])
    assert (started.state, started.purpose, started.reason_code) == (
        SessionState.QUEUED,
        Purpose.COURSEWORK,
        "class_started_by",
    )
    assert started.reason == "started for your class by Grace Hopper"
    assert AuditEvent.objects.get(kind=AuditKind.CLASS_STARTED).data["started"] == 3

    again = do_start_all(teacher, course)
    assert (again.started, again.already_open) == (0, 4)


@pytest.mark.django_db
def test_start_all_skips_students_at_their_open_session_limit(teacher, course, students):
    busy = students[1]
    for _ in range(MAX_OPEN_SESSIONS_PER_USER):
        Session.objects.create(user=busy, profile=default_profile_of(course), purpose=Purpose.HOBBY)

    result = do_start_all(teacher, course)

    assert (result.started, result.skipped_at_limit) == (3, 1)
    assert not open_sessions(course).filter(user=busy).exists()


@pytest.mark.django_db
def test_start_all_links_the_booking_in_its_window(teacher, course):
    now = timezone.now()
    booking = Booking.objects.create(
        course=course,
        profile=default_profile_of(course),
        seats=4,
        starts_at=now - timedelta(minutes=5),
        ends_at=now + timedelta(hours=1),
    )
    do_start_all(teacher, course)
    assert set(open_sessions(course).values_list("booking_id", flat=True)) == {booking.pk}


@pytest.mark.django_db
def test_start_all_needs_the_courses_default_desktop(teacher, course):
    set_default_profile(course, None)
    with pytest.raises(ServiceError) as refused:
        do_start_all(teacher, course)
    assert refused.value.field == "default_profile"
    assert not open_sessions(course).exists()


@pytest.mark.django_db
def test_stop_all_stops_every_open_session_of_the_course(teacher, course, students, profile):
    do_start_all(teacher, course)
    running = open_sessions(course).first()
    Session.objects.filter(pk=running.pk).update(
        state=SessionState.RUNNING, started_at=timezone.now()
    )
    elsewhere = Session.objects.create(user=students[0], profile=profile, purpose=Purpose.HOBBY)

    stopped = do_stop_all(teacher, course)

    assert stopped == 4
    states = dict(Session.objects.filter(course=course).values_list("pk", "state"))
    assert states.pop(running.pk) == SessionState.STOPPING
    assert set(states.values()) == {SessionState.CANCELLED}
    assert Session.objects.get(pk=elsewhere.pk).state == SessionState.QUEUED
    assert Session.objects.get(pk=running.pk).reason_code == "class_stopped_by"
    assert AuditEvent.objects.get(kind=AuditKind.CLASS_STOPPED).data["stopped"] == 4


@pytest.mark.django_db
def test_one_students_desktop_is_stopped_from_the_live_class(teacher, course, students):
    do_start_all(teacher, course)
    one = class_sessions(course).first()
    client = Client()
    client.force_login(teacher)
    response = client.post(f"/courses/cs101/sessions/{one.pk}/stop/", {"confirmed": "1"})
    assert response.status_code == 302
    assert Session.objects.get(pk=one.pk).state == SessionState.CANCELLED
    assert class_sessions(course).count() == 3
    with pytest.raises(ServiceError):
        do_stop_class_session(teacher, course, one.pk)


@pytest.mark.django_db
def test_the_pages_start_and_stop_all_and_say_how_many_were_skipped(teacher, course, students):
    for _ in range(MAX_OPEN_SESSIONS_PER_USER):
        Session.objects.create(
            user=students[3], profile=default_profile_of(course), purpose="hobby"
        )
    client = Client()
    client.force_login(teacher)
    answer = client.post("/courses/cs101/start-all/", follow=True)
    text = answer.content.decode()
    assert "3 desktops asked for." in text
    assert "1 student was skipped: they have the most open sessions allowed." in text
    assert open_sessions(course).count() == 3
    assert (
        "3 desktops stopped."
        in client.post("/courses/cs101/stop-all/", {"confirmed": "1"}, follow=True).content.decode()
    )
    assert open_sessions(course).count() == 0


def _connect(user, code: str = "cs101"):
    communicator = WebsocketCommunicator(ClassConsumer.as_asgi(), f"/ws/courses/{code}/")
    communicator.scope["user"] = user
    communicator.scope["url_route"] = {"kwargs": {"code": code}}
    return communicator


@pytest.mark.django_db(transaction=True)
def test_the_live_class_receives_each_update_as_the_row_fragment(teacher, course, make_user):
    ta = make_user("tina")
    assign_perm("portal.view_live_class", ta, course)
    Member.objects.create(user=ta, language="zh-hans", time_zone="Asia/Shanghai")

    async def listen():
        communicator = _connect(ta)
        connected, _ = await communicator.connect()
        assert connected
        result = await database_sync_to_async(do_start_all)(teacher, course)
        messages = [
            await asyncio.wait_for(communicator.receive_json_from(), timeout=5)
            for _ in range(result.started)
        ]
        await communicator.disconnect()
        return result, messages

    result, messages = async_to_sync(listen)()
    assert {m["session"] for m in messages} == set(result.session_ids)
    first = messages[0]
    assert first["type"] == "class.row"
    assert first["html"].startswith(f'<tr id="class-row-{first["session"]}"')
    assert "排队中" in first["html"]  # the state in the listener's language
    asked = Session.objects.get(pk=first["session"]).created_at.astimezone(SHANGHAI)
    assert f"{asked.hour}:{asked.minute:02d}" in first["html"]  # and in the listener's zone
    assert "/stop/" not in first["html"]  # a TA without manage_class_desktops gets no button


@pytest.mark.django_db(transaction=True)
def test_the_live_class_refuses_students_and_strangers(course, students, stranger):
    async def attempt(user):
        communicator = _connect(user)
        connected, _ = await communicator.connect()
        # Accepted, then closed with the code, so that the page can read it and stop.
        closed = await communicator.receive_output(timeout=5)
        await communicator.disconnect()
        return connected, closed

    for user in (students[0], stranger):
        assert async_to_sync(attempt)(user) == (True, {"type": "websocket.close", "code": 4403})
