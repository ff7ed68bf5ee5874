"""The thesis-grant and quota-request pages for each role: advisor, admin, student, TA,
stranger; who may post what (403 / 404), bad input (400, nothing made)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone
from guardian.shortcuts import assign_perm
from rest_framework.test import APIClient

from people.models import Course, Member, Role, ThesisGrant
from scheduling.choices import AuditKind
from scheduling.models import AuditEvent
from scheduling.models.policy import QuotaRequest, QuotaRequestState
from scheduling.services.grants import check_grant, do_grant
from scheduling.services.quota_requests import check_ask, do_ask

pytestmark = pytest.mark.django_db


@pytest.fixture
def advisor(make_user):
    user = make_user("prof")
    Member.objects.create(user=user, role=Role.FACULTY)
    return user


@pytest.fixture
def course(make_user, owner):
    course = Course.objects.create(code="cs101", title="Intro")
    course.instructors.add(make_user("teacher"))
    course.students.add(owner)
    return course


def client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def give(advisor, student, days: int = 30) -> ThesisGrant:
    until = timezone.localdate() + timedelta(days=days)
    return do_grant(advisor, check_grant(advisor, student.username, until))


def test_an_advisor_grants_from_the_page_and_sees_a_revoke_button(advisor, owner):
    page = client_for(advisor)
    until = (timezone.localdate() + timedelta(days=90)).isoformat()
    made = page.post(reverse("thesis-grants"), {"student": "ada", "until": until, "note": "ch 3"})
    assert made.status_code == 302
    grant = ThesisGrant.objects.get()
    assert (grant.student, grant.granted_by) == (owner, advisor)
    shown = page.get(reverse("thesis-grants")).content.decode()
    assert 'id="grant-form"' in shown and "ada" in shown
    assert reverse("thesis-grant-revoke", args=[grant.pk]) in shown


def test_a_bad_grant_is_refused_with_the_field_named(advisor, owner):
    refused = client_for(advisor).post(reverse("thesis-grants"), {"student": "nobody", "until": ""})
    assert refused.status_code == 400
    body = refused.content.decode()
    assert "nobody" in body and "last day" in body
    assert not ThesisGrant.objects.exists()


def test_a_student_sees_their_grant_without_a_form_and_may_not_grant(advisor, owner):
    grant = give(advisor, owner)
    page = client_for(owner)
    shown = page.get(reverse("thesis-grants")).content.decode()
    assert 'id="my-grants"' in shown and 'id="grant-form"' not in shown
    assert "prof" in shown and reverse("thesis-grant-revoke", args=[grant.pk]) not in shown
    until = timezone.localdate().isoformat()
    assert (
        page.post(reverse("thesis-grants"), {"student": "ben", "until": until}).status_code == 403
    )


def test_others_see_they_have_none(stranger):
    shown = client_for(stranger).get(reverse("thesis-grants"))
    assert shown.status_code == 200 and 'id="no-grants"' in shown.content.decode()


def test_revoking_from_the_page(advisor, owner, stranger, admin_user):
    grant = give(advisor, owner)
    url = reverse("thesis-grant-revoke", args=[grant.pk])
    assert client_for(stranger).post(url).status_code == 404
    assert client_for(owner).post(url).status_code == 403
    assert client_for(advisor).get(url).status_code == 405
    assert client_for(admin_user).post(url).status_code == 302
    grant.refresh_from_db()
    assert grant.revoked_by == admin_user
    assert client_for(advisor).post(url).status_code == 302  # already revoked: a message
    admin_page = client_for(admin_user).get(reverse("thesis-grants")).content.decode()
    assert "All grants" in admin_page


def test_anonymous_people_are_sent_to_log_in(client):
    for name in ("thesis-grants", "quota-requests"):
        assert client.get(reverse(name)).status_code == 302


def test_a_student_asks_for_hours_on_the_page(owner, course):
    page = client_for(owner)
    shown = page.get(reverse("quota-requests")).content.decode()
    assert 'id="ask-form"' in shown and 'value="cs101"' in shown
    assert 'id="page-config"' in shown and "/ws/updates/" in shown
    sent = page.post(reverse("quota-requests"), {"course": "cs101", "hours": "6", "reason": "GAN"})
    assert sent.status_code == 302
    request = QuotaRequest.objects.get()
    assert (request.student, request.hours) == (owner, 6)
    shown = page.get(reverse("quota-requests")).content.decode()
    assert f'data-request-id="{request.pk}"' in shown and "Waiting for an answer" in shown


def test_a_bad_ask_is_refused_and_nothing_made(owner, course):
    page = client_for(owner)
    for body in (
        {"course": "ma201", "hours": "6", "reason": "x"},
        {"course": "cs101", "hours": "-1", "reason": "x"},
        {"course": "cs101", "hours": "6", "reason": ""},
    ):
        assert page.post(reverse("quota-requests"), body).status_code == 400
    assert not QuotaRequest.objects.exists()


def test_the_teacher_answers_and_a_ta_only_with_the_permission(owner, course, make_user):
    request = do_ask(owner, check_ask(owner, "cs101", 8, "project"))
    url = reverse("quota-request-answer", args=[request.pk])
    teacher = client_for(course.instructors.get())
    shown = teacher.get(reverse("quota-requests") + "?course=cs101").content.decode()
    assert "ada asks for 8 GPU-hours in cs101" in shown and url in shown
    other = teacher.get(reverse("quota-requests") + "?course=ma201").content.decode()
    assert 'id="nothing-to-answer"' in other

    ta_user = make_user("ta")
    ta = client_for(ta_user)
    assert 'id="nothing-to-answer"' not in ta.get(reverse("quota-requests")).content.decode()
    assert ta.post(url, {"decision": "grant", "hours": "2"}).status_code == 404
    assert client_for(owner).post(url, {"decision": "grant"}).status_code == 403
    assign_perm("portal.answer_quota_requests", ta_user, course)
    assert ta.post(url, {"decision": "grant", "hours": "99"}).status_code == 400  # over asked
    assert ta.post(url, {"decision": "grant", "hours": "2", "answer": "ok"}).status_code == 302
    request.refresh_from_db()
    assert (request.state, request.hours, request.answered_by) == (
        QuotaRequestState.GRANTED,
        2,
        ta_user,
    )
    student_page = client_for(owner).get(reverse("quota-requests")).content.decode()
    assert "Granted" in student_page and "ok" in student_page


def test_a_ta_is_not_offered_and_may_not_post_an_answer_to_their_own_request(
    owner, course, make_user
):
    ta_user = make_user("ta2")
    assign_perm("portal.answer_quota_requests", ta_user, course)
    course.students.add(ta_user)
    own = do_ask(ta_user, check_ask(ta_user, "cs101", 500, "my own runs"))
    students = do_ask(owner, check_ask(owner, "cs101", 8, "project"))
    ta = client_for(ta_user)
    shown = ta.get(reverse("quota-requests")).content.decode()
    assert reverse("quota-request-answer", args=[students.pk]) in shown
    assert reverse("quota-request-answer", args=[own.pk]) not in shown
    assert f'data-request-id="{own.pk}"' in shown  # listed among their own, to read

    refused = ta.post(reverse("quota-request-answer", args=[own.pk]), {"decision": "grant"})
    assert refused.status_code == 403
    assert "You cannot answer your own request" in refused.content.decode()
    own.refresh_from_db()
    assert own.state == QuotaRequestState.PENDING
    event = AuditEvent.objects.get(kind=AuditKind.QUOTA_SELF_ANSWER_REFUSED)
    assert (event.actor, event.data["request"]) == ("user:ta2", own.pk)


def test_the_answer_form_offers_grant_and_refuse_as_radio_buttons(owner, course):
    request = do_ask(owner, check_ask(owner, "cs101", 8, "project"))
    shown = client_for(course.instructors.get()).get(reverse("quota-requests")).content.decode()
    for value in ("grant", "refuse"):
        assert (
            f'<input type="radio" name="decision" value="{value}" '
            f'id="request-{request.pk}-decision_' in shown
        )


def test_teachers_see_how_many_requests_wait_in_the_header_and_on_the_course_page(
    owner, stranger, course, make_user
):
    teacher = course.instructors.get()
    course.students.add(stranger, teacher)
    for student in (owner, stranger, teacher):  # the teacher's own request is not theirs to answer
        do_ask(student, check_ask(student, "cs101", 8, "project"))
    answering_ta, watching_ta = make_user("ta"), make_user("ta-watch")
    assign_perm("portal.answer_quota_requests", answering_ta, course)
    assign_perm("portal.view_live_class", watching_ta, course)

    for who, waiting in ((teacher, 2), (answering_ta, 3)):
        page = client_for(who)
        with CaptureQueriesContext(connection) as queries:
            header = page.get(reverse("thesis-grants")).content.decode()
        asked = [q for q in queries.captured_queries if "quotarequest" in q["sql"]]
        assert len(asked) == 1  # the header's count is one query
        assert f'<span class="count" id="nav-quota-waiting">{waiting}<' in header
        course_page = page.get(reverse("course-detail", args=["cs101"])).content.decode()
        assert 'id="course-quota-waiting"' in course_page
        assert f"{waiting}</span> quota requests wait for your answer" in course_page
    for who in (watching_ta, owner):  # may not answer: no count
        assert (
            'id="nav-quota-waiting"'
            not in client_for(who).get(reverse("thesis-grants")).content.decode()
        )
    watching = client_for(watching_ta).get(reverse("course-detail", args=["cs101"]))
    assert 'id="course-quota-waiting"' not in watching.content.decode()


def test_someone_with_no_course_is_told_there_is_no_one_to_ask(stranger):
    shown = client_for(stranger).get(reverse("quota-requests")).content.decode()
    assert 'id="no-quota-requests"' in shown


def test_the_nav_links_the_pages(owner):
    shown = client_for(owner).get(reverse("thesis-grants")).content.decode()
    assert f'href="{reverse("quota-requests")}"' in shown
    assert f'href="{reverse("thesis-grants")}"' in shown


# --- the API -------------------------------------------------------------------------------


def api_for(user):
    client = APIClient()
    client.force_authenticate(user)
    return client


def test_api_grants_lists_what_each_may_see_and_creates_for_faculty(advisor, owner, stranger):
    until = (timezone.localdate() + timedelta(days=10)).isoformat()
    refused = api_for(owner).post("/api/v1/thesis-grants/", {"student": "ben", "until": until})
    assert refused.status_code == 403
    bad = api_for(advisor).post("/api/v1/thesis-grants/", {"student": "nobody", "until": until})
    assert bad.status_code == 400 and "student" in bad.json()
    made = api_for(advisor).post("/api/v1/thesis-grants/", {"student": "ada", "until": until})
    assert made.status_code == 201
    body = made.json()
    assert (body["student"], body["granted_by"], body["active"]) == ("ada", "prof", True)
    assert [g["id"] for g in api_for(owner).get("/api/v1/thesis-grants/").json()] == [body["id"]]
    assert api_for(stranger).get("/api/v1/thesis-grants/").json() == []
    revoke = f"/api/v1/thesis-grants/{body['id']}/revoke/"
    assert api_for(stranger).post(revoke).status_code == 404
    assert api_for(owner).post(revoke).status_code == 403
    revoked = api_for(advisor).post(revoke)
    assert revoked.status_code == 200 and revoked.json()["active"] is False
    assert api_for(advisor).post(revoke).status_code == 409


def test_api_quota_requests_ask_and_answer(owner, course, make_user, stranger):
    asked = api_for(owner).post(
        "/api/v1/quota-requests/", {"course": "cs101", "hours": 6, "reason": "GAN"}, format="json"
    )
    assert asked.status_code == 201 and asked.json()["state"] == "pending"
    again = api_for(owner).post(
        "/api/v1/quota-requests/", {"course": "cs101", "hours": 1, "reason": "x"}, format="json"
    )
    assert again.status_code == 400 and "course" in again.json()
    request_id = asked.json()["id"]
    answer = f"/api/v1/quota-requests/{request_id}/answer/"
    assert api_for(stranger).post(answer, {"decision": "grant"}).status_code == 404
    assert api_for(owner).post(answer, {"decision": "grant"}).status_code == 403
    teacher = api_for(course.instructors.get())
    assert teacher.get("/api/v1/quota-requests/?course=cs101").json()[0]["student"] == "ada"
    assert teacher.post(answer, {"decision": "maybe"}).status_code == 400
    granted = teacher.post(answer, {"decision": "grant", "hours": 4}, format="json")
    assert granted.status_code == 200
    assert (granted.json()["state"], granted.json()["hours"]) == ("granted", 4.0)
    mine = api_for(owner).get("/api/v1/me/quota/").json()
    assert mine["extra_gpu_hours"] == 4.0 and mine["max_open_sessions"] == 3


def test_api_refuses_an_admin_answering_their_own_request_and_audits_it(course, admin_user):
    course.students.add(admin_user)
    asked = api_for(admin_user).post(
        "/api/v1/quota-requests/", {"course": "cs101", "hours": 500, "reason": "x"}, format="json"
    )
    request_id = asked.json()["id"]
    answer = f"/api/v1/quota-requests/{request_id}/answer/"
    refused = api_for(admin_user).post(answer, {"decision": "grant"}, format="json")
    assert refused.status_code == 403
    assert "your own request" in refused.json()["detail"]
    assert QuotaRequest.objects.get().state == QuotaRequestState.PENDING
    event = AuditEvent.objects.get(kind=AuditKind.QUOTA_SELF_ANSWER_REFUSED)
    assert (event.actor, event.data["request"]) == ("user:root", request_id)


def test_the_schema_documents_the_grant_resources(admin_user):
    schema = api_for(admin_user).get("/api/schema/", {"format": "json"}).json()
    for path in (
        "/api/v1/thesis-grants/",
        "/api/v1/thesis-grants/{id}/revoke/",
        "/api/v1/quota-requests/",
        "/api/v1/quota-requests/{id}/answer/",
        "/api/v1/me/quota/",
    ):
        assert path in schema["paths"]
