"""A student cannot read, stop or open another student's session: API, pages, WebSocket."""

from __future__ import annotations

import pytest
from django.test import Client
from guardian.shortcuts import assign_perm

from people.models import Course
from scheduling.choices import Purpose, SessionState
from scheduling.models import Node, Session
from scheduling.services.sessions import check_submit, do_submit
from tests.conftest import gpu_inventory

from .test_api import client_for

pytestmark = pytest.mark.django_db


@pytest.fixture
def running_session(owner, profile, register_node):
    # Registered at 127.0.0.1 (its gateway is reached there), with a GPU the profile fits on: a
    # profile no node could ever run is refused at submit.
    node, _ = register_node("perm-node", [gpu_inventory("GPU-perm", 0, shares=2)])
    Node.objects.filter(pk=node.pk).update(runtime="docker")  # a real desktop to show
    session = do_submit(owner, check_submit(owner, profile.pk, Purpose.HOBBY, None))
    Session.objects.filter(pk=session.pk).update(
        state=SessionState.RUNNING, node=node, desktop_host="127.0.0.1", desktop_port=9
    )
    return session


def test_api_hides_another_students_session(stranger, running_session):
    client = client_for(stranger)
    assert client.get(f"/api/v1/sessions/{running_session.pk}/").status_code == 404
    assert client.post(f"/api/v1/sessions/{running_session.pk}/stop/").status_code == 404
    assert client.get("/api/v1/sessions/").json() == []
    running_session.refresh_from_db()
    assert running_session.state == SessionState.RUNNING


def test_pages_hide_another_students_session(stranger, running_session):
    browser = Client()
    browser.force_login(stranger)
    assert browser.get(f"/sessions/{running_session.pk}/").status_code == 404
    assert browser.get(f"/desktop/{running_session.pk}/").status_code == 404
    assert browser.post(f"/sessions/{running_session.pk}/stop/").status_code == 404
    running_session.refresh_from_db()
    assert running_session.state == SessionState.RUNNING


def test_owner_sees_the_desktop_page(owner, running_session):
    browser = Client()
    browser.force_login(owner)
    page = browser.get(f"/desktop/{running_session.pk}/")
    assert page.status_code == 200
    assert b'id="screen"' in page.content
    # The way back leads to the session page, not to the API route of the same shape.
    assert f'href="/sessions/{running_session.pk}/"'.encode() in page.content


def _ask_ticket(user, session_id: int) -> int:
    """The status of the page's ticket request for the desktop's screen."""
    return (
        client_for(user)
        .post(f"/api/v1/sessions/{session_id}/ticket/", {"purpose": "screen"}, format="json")
        .status_code
    )


@pytest.mark.django_db(transaction=True)
def test_a_desktop_ticket_is_refused_to_another_student(stranger, running_session):
    assert _ask_ticket(stranger, running_session.pk) == 404


@pytest.mark.django_db(transaction=True)
def test_the_owner_passes_the_check_for_a_desktop_ticket(owner, running_session):
    # The node has no gateway: the owner passes the permission check and is then told the
    # desktop cannot be opened (409), not that it is forbidden (403) or unknown (404).
    assert _ask_ticket(owner, running_session.pk) == 409


def test_a_guardian_grant_lets_an_instructor_read_but_not_open_or_stop(make_user, running_session):
    from guardian.shortcuts import assign_perm

    instructor = make_user("ines")
    client = client_for(instructor)
    assert client.get(f"/api/v1/sessions/{running_session.pk}/").status_code == 404
    assign_perm("scheduling.view_session", instructor, running_session)
    answer = client.get(f"/api/v1/sessions/{running_session.pk}/")
    assert answer.status_code == 200
    assert answer.json()["state"] == "RUNNING"
    browser = Client()
    browser.force_login(instructor)
    assert browser.get(f"/desktop/{running_session.pk}/").status_code == 404
    assert browser.post(f"/sessions/{running_session.pk}/stop/").status_code == 404


# --- The permission matrix ----------------------------------------------------------------
#
# Each role × each page and endpoint → the answer it must get. OK is 200; HIDDEN is a
# refusal, 403 or 404 (never 200, never 500); LOGIN is a redirect to the login page
# (anonymous pages); AUTH is 401 or 403 (anonymous API calls).

ROLES = ("anonymous", "student", "other_student", "ta", "other_instructor", "instructor", "admin")
OK, HIDDEN, LOGIN, AUTH = "ok", "hidden", "login", "auth"
ANSWERS = {OK: {200}, HIDDEN: {403, 404}, LOGIN: {302}, AUTH: {401, 403}}


def row(url: str, *answers: str, marks=()):
    """One URL's expected answers, in the order of ROLES."""
    assert len(answers) == len(ROLES), url
    return pytest.param(url, dict(zip(ROLES, answers, strict=True)), id=url, marks=marks)


EVERYONE_PAGE = (LOGIN, OK, OK, OK, OK, OK, OK)
EVERYONE_API = (AUTH, OK, OK, OK, OK, OK, OK)
# The session is the enrolled student's: only they and an admin may read or open it.
OWNER_PAGE = (LOGIN, OK, HIDDEN, HIDDEN, HIDDEN, HIDDEN, OK)
OWNER_API = (AUTH, OK, HIDDEN, HIDDEN, HIDDEN, HIDDEN, OK)
# Course pages are for those who teach it: instructors, its TA, admins (not its students).
TEACHING_PAGE = (LOGIN, HIDDEN, HIDDEN, OK, HIDDEN, OK, OK)
TEACHING_API = (AUTH, HIDDEN, HIDDEN, OK, HIDDEN, OK, OK)
# Roster and bookings: the instructors' (and admins') alone; the TA has no grant for them.
INSTRUCTOR_PAGE = (LOGIN, HIDDEN, HIDDEN, HIDDEN, HIDDEN, OK, OK)
INSTRUCTOR_API = (AUTH, HIDDEN, HIDDEN, HIDDEN, HIDDEN, OK, OK)

MATRIX = [
    row("/", *EVERYONE_PAGE),
    row("/sessions/{session}/", *OWNER_PAGE),
    row("/desktop/{session}/", *OWNER_PAGE),
    row("/history/", *EVERYONE_PAGE),
    row("/account/", *EVERYONE_PAGE),
    # Everyone signed in may open the list; it lists only what they teach (see below).
    row("/courses/", *EVERYONE_PAGE),
    row("/courses/{course}/", *TEACHING_PAGE),
    # Booking is the instructors'; the calendar of bookings is read by those who teach it.
    row("/courses/{course}/book/", *INSTRUCTOR_PAGE),
    row("/courses/{course}/calendar/", *TEACHING_PAGE),
    # Students see their own grant there, faculty the grants they gave.
    row("/thesis/", *EVERYONE_PAGE),
    # Students ask, instructors and TAs with the grant answer: each sees their own share.
    row("/quota-requests/", *EVERYONE_PAGE),
    row("/api/v1/sessions/", *EVERYONE_API),
    row("/api/v1/sessions/{session}/", *OWNER_API),
    row("/api/v1/bookings/", *EVERYONE_API),
    row("/api/v1/booking-series/", *EVERYONE_API),
    row("/api/v1/courses/", *EVERYONE_API),
    row("/api/v1/courses/{course}/", *TEACHING_API),
    row("/api/v1/courses/{course}/roster/", *INSTRUCTOR_API),
    row("/api/v1/courses/{course}/class/", *TEACHING_API),
    row("/api/v1/thesis-grants/", *EVERYONE_API),
    row("/api/v1/quota-requests/", *EVERYONE_API),
]


@pytest.fixture
def fast_passwords(settings):
    # Seven people per row: the test's own users need no slow password hashing.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def people(fast_passwords, make_user, profile, admin_user):
    """A course with an instructor and a TA, an enrolled student with a running coursework
    session of hers, a student of nothing, the instructor of another course, and an admin."""
    course = Course.objects.create(code="cs101", title="Intro", department="cs")
    other_course = Course.objects.create(code="ee201", title="Circuits", department="ee")
    users = {
        "student": make_user("stu"),
        "other_student": make_user("oth"),
        "ta": make_user("tia"),
        "other_instructor": make_user("oin"),
        "instructor": make_user("ins"),
        "admin": admin_user,
    }
    course.instructors.add(users["instructor"])
    course.students.add(users["student"])
    other_course.instructors.add(users["other_instructor"])
    for perm in ("view_live_class", "manage_class_desktops", "answer_quota_requests"):
        assign_perm(f"portal.{perm}", users["ta"], course)
    assign_perm("portal.view_course", users["ta"], course)
    student = users["student"]
    session = do_submit(student, check_submit(student, profile.pk, Purpose.COURSEWORK, "cs101"))
    Session.objects.filter(pk=session.pk).update(
        state=SessionState.RUNNING, desktop_host="127.0.0.1", desktop_port=9
    )
    return {"users": users, "course": course, "session": session}


def answer_of(users: dict, role: str, path: str):
    client = Client()
    if role != "anonymous":
        client.force_login(users[role])
    return client.get(path)


@pytest.mark.parametrize(("url", "expected"), MATRIX)
def test_permission_matrix(people, url, expected):
    path = url.format(session=people["session"].pk, course=people["course"].code)
    wrong = {}
    for role, want in expected.items():
        answer = answer_of(people["users"], role, path)
        status = answer.status_code
        if status not in ANSWERS[want]:
            wrong[role] = f"{status}, expected {want} {sorted(ANSWERS[want])}"
        elif want == LOGIN and not answer["Location"].startswith("/login/"):
            wrong[role] = f"redirected to {answer['Location']}, not to the login page"
    assert not wrong, f"{path}: {wrong}"


@pytest.mark.parametrize(
    ("url", "shown_to"),
    [
        pytest.param("/api/v1/sessions/", {"student", "admin"}, id="sessions"),
        pytest.param("/api/v1/courses/", {"ta", "instructor", "admin"}, id="courses"),
        pytest.param("/courses/", {"ta", "instructor", "admin"}, id="courses-page"),
    ],
)
def test_lists_show_only_what_each_role_may_read(people, url, shown_to):
    """A list answers 200 to everyone signed in, but names the session or the course only
    to those who may read it."""
    marker = {
        "/api/v1/sessions/": f'"id":{people["session"].pk}',
        "/api/v1/courses/": '"code":"cs101"',
        "/courses/": "/courses/cs101/",
    }[url]
    seen = {}
    for role in ROLES[1:]:
        answer = answer_of(people["users"], role, url)
        assert answer.status_code == 200, (role, answer.status_code)
        seen[role] = marker in answer.content.decode().replace(" ", "")
    assert {role for role, shown in seen.items() if shown} == shown_to
