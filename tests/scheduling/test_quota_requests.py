"""Quota requests: a student over their weekly GPU-hours asks a course's teachers for more;
an instructor, a TA allowed to, or an admin grants (all or fewer hours) or refuses. Granted
hours raise the weekly limit for 7 days, for the submit check and the engine alike.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.core import mail
from django.utils import timezone
from guardian.shortcuts import assign_perm

from people.models import Course
from portal.live.consumers import UpdatesConsumer
from scheduling.choices import AuditKind, Purpose, SessionState
from scheduling.engine.reasons import Code
from scheduling.events import quota_request_payload
from scheduling.layer_sender import sender
from scheduling.models import AuditEvent, Quota, Session
from scheduling.models.policy import PoolPolicy, QuotaRequest, QuotaRequestState
from scheduling.services import Conflict, NotFound, ServiceError
from scheduling.services.cycle import do_scheduling_cycle
from scheduling.services.eligibility import Forbidden
from scheduling.services.quota_requests import (
    check_answer,
    check_ask,
    do_answer,
    do_ask,
    extra_gpu_hours,
    pending_to_answer,
    visible_quota_requests,
)
from scheduling.services.quota_view import quota_left
from scheduling.services.sessions import check_submit

pytestmark = pytest.mark.django_db


@pytest.fixture
def course(make_user, owner):
    course = Course.objects.create(code="cs101", title="Intro")
    course.instructors.add(make_user("prof", email="prof@example.edu"))
    course.students.add(owner)
    return course


@pytest.fixture
def teacher(course):
    return course.instructors.get()


def used_two_gpu_hours(user, profile) -> Session:
    """A finished desktop that used one whole GPU (1 CU) for two hours today."""
    now = timezone.now()
    return Session.objects.create(
        user=user,
        profile=profile,
        purpose=Purpose.HOBBY,
        state=SessionState.ENDED,
        started_at=now - timedelta(hours=3),
        ended_at=now - timedelta(hours=1),
        compute_units=1.0,
    )


def ask(user, hours=5.0, course="cs101", reason="Final project training runs") -> QuotaRequest:
    return do_ask(user, check_ask(user, course, hours, reason))


def test_a_student_asks_and_the_instructor_is_told(
    owner, teacher, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        request = ask(owner)
    assert request.state == QuotaRequestState.PENDING
    assert AuditEvent.objects.get(kind=AuditKind.QUOTA_REQUESTED).data["hours"] == 5.0
    [letter] = mail.outbox
    assert letter.to == ["prof@example.edu"] and "ada" in letter.subject


def test_one_pending_request_per_course(owner, course):
    ask(owner)
    with pytest.raises(ServiceError) as second:
        check_ask(owner, "cs101", 2, "more")
    assert second.value.field == "course"
    assert QuotaRequest.objects.count() == 1


def test_asking_needs_an_enrolled_course_positive_hours_and_a_reason(owner, stranger, course):
    for who, code, hours, reason, field in (
        (stranger, "cs101", 5, "why", "course"),
        (owner, "nope", 5, "why", "course"),
        (owner, "cs101", 0, "why", "hours"),
        (owner, "cs101", "lots", "why", "hours"),
        (owner, "cs101", 5, "  ", "reason"),
    ):
        with pytest.raises(ServiceError) as refused:
            check_ask(who, code, hours, reason)
        assert refused.value.field == field
    assert not QuotaRequest.objects.exists()


def test_who_may_answer(owner, teacher, course, make_user, admin_user):
    request = ask(owner)
    other_course = Course.objects.create(code="ma201", title="Algebra")
    outsider = make_user("other-prof")
    other_course.instructors.add(outsider)
    with pytest.raises(Forbidden):
        check_answer(owner, request.pk, "grant", 5)  # the student sees it, may not answer
    with pytest.raises(NotFound):
        check_answer(outsider, request.pk, "grant", 5)  # another course's instructor
    ta = make_user("ta")
    with pytest.raises(NotFound):
        check_answer(ta, request.pk, "grant", 5)
    assign_perm("portal.answer_quota_requests", ta, course)
    assert check_answer(ta, request.pk, "grant", 5).request == request
    assert check_answer(teacher, request.pk, "refuse", None).grant is False
    assert check_answer(admin_user, request.pk, "grant", 1).hours == 1
    assert list(visible_quota_requests(ta)) == [request]
    assert not visible_quota_requests(outsider).exists()


def test_nobody_answers_their_own_request_whatever_their_rights_and_the_try_is_audited(
    course, teacher, make_user, admin_user
):
    """The probe: a TA enrolled in the course granted their own request (40 -> 1,540 weekly
    GPU-hours). A TA allowed to answer, an instructor enrolled in their own course and an
    admin are each refused, and each try is in the audit trail; nothing is answered."""
    ta = make_user("ta2")
    assign_perm("portal.answer_quota_requests", ta, course)
    course.students.add(ta, teacher, admin_user)
    for asker in (ta, teacher, admin_user):
        request = ask(asker, hours=500)
        with pytest.raises(Forbidden) as refused:
            check_answer(asker, request.pk, "grant", 500)
        assert "your own request" in refused.value.message
        request.refresh_from_db()
        assert request.state == QuotaRequestState.PENDING
        event = AuditEvent.objects.filter(kind=AuditKind.QUOTA_SELF_ANSWER_REFUSED).latest("pk")
        assert (event.actor, event.data["request"], event.data["course"]) == (
            f"user:{asker.username}",
            request.pk,
            "cs101",
        )
    assert AuditEvent.objects.filter(kind=AuditKind.QUOTA_SELF_ANSWER_REFUSED).count() == 3
    assert not AuditEvent.objects.filter(kind=AuditKind.QUOTA_ANSWERED).exists()
    # Someone else still answers the TA's request.
    theirs = QuotaRequest.objects.get(student=ta)
    assert check_answer(teacher, theirs.pk, "grant", 5).hours == 5


def test_the_requests_to_answer_leave_out_ones_own(course, teacher, owner, make_user):
    course.students.add(teacher)
    own = ask(teacher)
    students = ask(owner)
    assert list(pending_to_answer(teacher)) == [students]
    assert own in visible_quota_requests(teacher)  # still theirs to read


def test_an_answer_grants_at_most_the_hours_asked_and_only_once(owner, teacher):
    request = ask(owner, hours=4)
    with pytest.raises(ServiceError) as too_many:
        check_answer(teacher, request.pk, "grant", 10)
    assert too_many.value.field == "hours"
    with pytest.raises(ServiceError) as undecided:
        check_answer(teacher, request.pk, "maybe", 1)
    assert undecided.value.field == "decision"
    do_answer(teacher, check_answer(teacher, request.pk, "grant", 3, "Go ahead"))
    request.refresh_from_db()
    assert (request.state, request.hours, request.answered_by) == ("granted", 3, teacher)
    assert AuditEvent.objects.get(kind=AuditKind.QUOTA_ANSWERED).data["hours"] == 3
    with pytest.raises(Conflict):
        check_answer(teacher, request.pk, "refuse", None)


def test_the_student_sees_the_answer_live_and_by_email(
    owner, teacher, django_capture_on_commit_callbacks, monkeypatch
):
    owner.email = "ada@example.edu"
    owner.save()
    request = ask(owner)
    sent = []
    monkeypatch.setattr(
        "scheduling.events._send", lambda group, payload: sent.append((group, payload))
    )
    with django_capture_on_commit_callbacks(execute=True):
        do_answer(teacher, check_answer(teacher, request.pk, "refuse", None, "Not this week"))
    [(group, payload)] = [(g, p) for g, p in sent if p["type"] != "admin.audit"]
    assert group == f"user-{owner.pk}" and payload["type"] == "quota.update"
    assert payload["request"]["state"] == "refused"
    assert payload["request"]["answer"] == "Not this week"
    [letter] = [m for m in mail.outbox if m.to == ["ada@example.edu"]]
    assert "refused" in letter.subject and "Not this week" in letter.body


def test_granted_hours_raise_the_weekly_limit_for_submit_and_for_the_engine(
    owner, teacher, profile, pool
):
    Quota.objects.create(scope="user", key="*", max_gpu_hours_week=1.0)
    used_two_gpu_hours(owner, profile)
    with pytest.raises(ServiceError):
        check_submit(owner, profile.pk, "hobby", None)  # 2 of 1 GPU-hours used
    waiting = Session.objects.create(user=owner, profile=profile, purpose=Purpose.HOBBY)
    do_scheduling_cycle()
    waiting.refresh_from_db()
    assert waiting.state == SessionState.QUEUED and waiting.reason_code == Code.QUOTA_GPU_HOURS
    left = quota_left(owner)
    assert (left.gpu_hours_week, left.max_gpu_hours_week, left.hours_left) == (2.0, 1.0, 0.0)

    request = ask(owner, hours=5)
    do_answer(teacher, check_answer(teacher, request.pk, "grant", 4))

    assert extra_gpu_hours(timezone.now()) == {"ada": 4.0}
    left = quota_left(owner)
    assert (left.max_gpu_hours_week, left.extra_gpu_hours, left.hours_left) == (5.0, 4.0, 3.0)
    check_submit(owner, profile.pk, "hobby", None)  # allowed again
    do_scheduling_cycle()
    waiting.refresh_from_db()
    assert waiting.state == SessionState.PLACED


def test_granted_hours_last_seven_days(owner, teacher):
    request = ask(owner)
    do_answer(teacher, check_answer(teacher, request.pk, "grant", None))
    assert extra_gpu_hours(timezone.now()) == {"ada": 5.0}
    assert extra_gpu_hours(timezone.now() + timedelta(days=7, minutes=1)) == {}


def test_the_payload_is_what_the_page_shows(owner, course):
    request = ask(owner)
    payload = quota_request_payload(request)
    assert (payload["course"], payload["hours"], payload["state"]) == ("cs101", 5.0, "pending")
    assert payload["answered_by"] is None


@pytest.mark.django_db(transaction=True)
def test_the_students_open_page_receives_the_answer_over_the_updates_socket(owner, teacher):
    request = ask(owner)
    assert sender().flush(timeout=10)  # the asking's own update went out before the page opened

    async def listen_and_answer() -> dict:
        communicator = WebsocketCommunicator(UpdatesConsumer.as_asgi(), "/ws/updates/")
        communicator.scope["user"] = owner
        connected, _code = await communicator.connect()
        assert connected
        await database_sync_to_async(
            lambda: do_answer(teacher, check_answer(teacher, request.pk, "grant", 2, "ok"))
        )()
        message = await asyncio.wait_for(communicator.receive_json_from(), timeout=5)
        await communicator.disconnect()
        return message

    message = async_to_sync(listen_and_answer)()
    assert message["type"] == "quota.update"
    got = message["request"]
    assert (got["id"], got["state"], got["state_label"], got["hours"], got["answer"]) == (
        request.pk,
        "granted",
        "Granted",
        2.0,
        "ok",
    )


def test_granted_hours_are_capped_per_person_per_week_across_courses(owner, teacher, make_user):
    """Two people with answer rights cannot grant each other without limit: what one person
    is granted in 7 days, all courses together, stops at the pool's cap."""
    PoolPolicy.current()
    PoolPolicy.objects.update(max_granted_gpu_hours_week=8)
    other = Course.objects.create(code="cs202", title="Systems")
    other.students.add(owner)
    other.instructors.add(colleague := make_user("wu"))
    do_answer(teacher, check_answer(teacher, ask(owner, hours=5).pk, "grant", None))
    second = ask(owner, hours=5, course="cs202")
    with pytest.raises(ServiceError) as refused:
        check_answer(colleague, second.pk, "grant", None)
    assert refused.value.field == "hours" and "at most 3" in refused.value.message
    do_answer(colleague, check_answer(colleague, second.pk, "grant", 3))
    assert extra_gpu_hours(timezone.now()) == {"ada": 8.0}
    answered = AuditEvent.objects.filter(kind=AuditKind.QUOTA_ANSWERED).order_by("pk")
    assert [e.data["week_cap"] for e in answered] == [8.0, 8.0]
    third = ask(owner, hours=1)
    with pytest.raises(ServiceError):
        check_answer(teacher, third.pk, "grant", 1)
    # A refusal is always possible, and the cap rechecks at the answer itself.
    do_answer(teacher, check_answer(teacher, third.pk, "refuse", None, "Over the cap"))


def test_the_cap_holds_when_two_answers_were_checked_before_either_was_stored(
    owner, teacher, make_user
):
    PoolPolicy.current()
    PoolPolicy.objects.update(max_granted_gpu_hours_week=6)
    other = Course.objects.create(code="cs202", title="Systems")
    other.students.add(owner)
    other.instructors.add(colleague := make_user("wu"))
    first = check_answer(teacher, ask(owner, hours=4).pk, "grant", None)
    second = check_answer(colleague, ask(owner, hours=4, course="cs202").pk, "grant", None)
    do_answer(teacher, first)
    with pytest.raises(ServiceError):
        do_answer(colleague, second)
    assert QuotaRequest.objects.filter(state=QuotaRequestState.GRANTED).count() == 1
