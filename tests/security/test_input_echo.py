"""Huge input is bounded and never echoed back whole (issue 25, finding 5c): a course of
100 KB is refused on its length, and an error that names what was typed quotes a short
excerpt of it."""

from __future__ import annotations

import pytest
from django.test import Client
from rest_framework.test import APIClient

from scheduling.excerpt import EXCERPT_MAX, excerpt
from scheduling.models import Session
from scheduling.services import ServiceError
from scheduling.services.sessions import check_submit

pytestmark = pytest.mark.django_db

HUGE = "x" * 100_000


def api_for(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def test_a_100_kb_course_gets_a_short_400_from_the_api(owner, profile):
    answer = api_for(owner).post(
        "/api/v1/sessions/",
        {"profile": profile.pk, "purpose": "coursework", "course": HUGE},
        format="json",
    )
    assert answer.status_code == 400
    assert "course" in answer.json()
    assert len(answer.content) < 500
    assert not Session.objects.exists()


def test_a_100_kb_purpose_is_not_repeated_back(owner, profile):
    answer = api_for(owner).post(
        "/api/v1/sessions/", {"profile": profile.pk, "purpose": HUGE}, format="json"
    )
    assert answer.status_code == 400
    assert len(answer.content) < 500
    assert "Purpose must be one of" in answer.json()["purpose"][0]


def test_the_home_form_refuses_a_100_kb_course_without_repeating_it(owner, profile):
    browser = Client()
    browser.force_login(owner)
    page = browser.post(
        "/sessions/new/", {"profile": profile.pk, "purpose": "coursework", "course": HUGE}
    )
    assert page.status_code == 400
    assert HUGE[:1000] not in page.content.decode()


def test_an_unknown_course_is_quoted_by_an_excerpt(owner, profile):
    typed = "<b>" + "y" * 60
    with pytest.raises(ServiceError) as refused:
        check_submit(owner, profile.pk, "coursework", typed)
    assert refused.value.message == f"There is no course “{excerpt(typed)}”."
    assert len(excerpt(typed)) == EXCERPT_MAX and excerpt(typed).endswith("…")


def test_an_excerpt_drops_control_characters():
    assert excerpt("ab\x00c\nd\x1b[31m") == "abcd[31m"


def test_a_100_kb_choice_in_any_api_is_quoted_by_an_excerpt_with_the_choices(admin_user):
    answer = api_for(admin_user).get(
        "/api/v1/usage/report/",
        {"group": HUGE, "period": "week", "start": "2026-03-01", "end": "2026-03-31"},
    )
    assert answer.status_code == 400
    assert len(answer.content) < 500
    message = answer.json()["group"][0]
    assert excerpt(HUGE) in message and "user" in message  # what was typed, cut; what to pick
