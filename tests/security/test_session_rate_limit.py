"""A person's submit and stop requests are rate limited (issue 25, finding 4): a burst, then
one every few seconds, counted in Redis so that every portal process sees one count; the
refused request writes nothing and says when to try again (docs/security.md, "Rate limits")."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from django.test import Client
from django.utils import translation
from rest_framework.test import APIClient

from scheduling.choices import AuditKind
from scheduling.models import AuditEvent, Session
from scheduling.services.api_tokens import issue_token
from scheduling.services.rate_limits import SUBMIT, RateLimited, check_session_rate
from tests.integration.stack import Stack, database_url_of

pytestmark = pytest.mark.django_db

BURST = 3
PERIOD_S = 600.0  # long: nothing refills while a test runs


@pytest.fixture(autouse=True)
def _limits(settings):
    settings.SESSION_RATE_BURST = BURST
    settings.SESSION_RATE_PERIOD_S = PERIOD_S


def api_for(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def submit(client: APIClient, profile) -> object:
    return client.post(
        "/api/v1/sessions/", {"profile": profile.pk, "purpose": "hobby"}, format="json"
    )


def test_api_submits_past_the_burst_get_429_with_retry_after_and_create_nothing(owner, profile):
    client = api_for(owner)
    for _ in range(BURST):
        created = submit(client, profile)
        assert created.status_code == 201, created.content
        client.post(f"/api/v1/sessions/{created.json()['id']}/stop/")
    sessions, events = Session.objects.count(), AuditEvent.objects.count()

    refused = submit(client, profile)

    assert refused.status_code == 429
    assert 0 < int(refused["Retry-After"]) <= PERIOD_S
    detail = refused.json()["detail"]
    assert "too many requests" in detail
    assert f"Try again in {refused['Retry-After']} seconds." in detail
    assert Session.objects.count() == sessions
    assert AuditEvent.objects.count() == events
    assert not AuditEvent.objects.filter(kind=AuditKind.SESSION_SUBMITTED).count() > BURST


def test_api_stops_are_limited_apart_from_submits(owner, profile):
    client = api_for(owner)
    ids = [submit(client, profile).json()["id"] for _ in range(BURST)]
    for session_id in ids:
        assert client.post(f"/api/v1/sessions/{session_id}/stop/").status_code == 200
    again = client.post(f"/api/v1/sessions/{ids[0]}/stop/")
    assert again.status_code == 429
    assert "Retry-After" in again


def test_the_limit_is_per_person(owner, stranger, profile):
    mine = api_for(owner)
    for _ in range(BURST):
        created = submit(mine, profile)
        mine.post(f"/api/v1/sessions/{created.json()['id']}/stop/")
    assert submit(mine, profile).status_code == 429
    assert submit(api_for(stranger), profile).status_code == 201


def test_the_message_is_in_the_readers_language(owner, profile):
    client = api_for(owner)
    for _ in range(BURST):
        created = submit(client, profile)
        client.post(f"/api/v1/sessions/{created.json()['id']}/stop/")
    refused = client.post(
        "/api/v1/sessions/",
        {"profile": profile.pk, "purpose": "hobby"},
        format="json",
        HTTP_ACCEPT_LANGUAGE="zh-hans",
    )
    assert refused.status_code == 429
    with translation.override("zh-hans"):
        expected = RateLimited(int(refused["Retry-After"])).message
    assert refused.json()["detail"] == expected
    assert "too many" not in expected


def test_the_home_page_form_shows_the_message_with_429_and_creates_nothing(owner, profile):
    browser = Client()
    browser.force_login(owner)
    for _ in range(BURST):
        answer = browser.post("/sessions/new/", {"profile": profile.pk, "purpose": "hobby"})
        assert answer.status_code == 302, answer.content.decode()[:2000]
        session = Session.objects.filter(user=owner).latest("pk")
        api_for(owner).post(f"/api/v1/sessions/{session.pk}/stop/")
    sessions, events = Session.objects.count(), AuditEvent.objects.count()

    refused = browser.post("/sessions/new/", {"profile": profile.pk, "purpose": "hobby"})

    assert refused.status_code == 429
    assert "Retry-After" in refused
    assert "You sent too many requests in a short time. Try again in" in refused.content.decode()
    assert Session.objects.count() == sessions
    assert AuditEvent.objects.count() == events


def test_a_burst_then_one_per_period(owner):
    start = 1_000_000.0
    for _ in range(BURST):
        check_session_rate(owner, SUBMIT, now=start)
    with pytest.raises(RateLimited) as refused:
        check_session_rate(owner, SUBMIT, now=start)
    assert refused.value.retry_after == PERIOD_S
    check_session_rate(owner, SUBMIT, now=start + PERIOD_S)  # one more period: one more
    with pytest.raises(RateLimited):
        check_session_rate(owner, SUBMIT, now=start + PERIOD_S)


def test_a_period_of_zero_turns_the_limit_off(owner, settings):
    settings.SESSION_RATE_PERIOD_S = 0
    for _ in range(BURST * 3):
        check_session_rate(owner, SUBMIT)


@pytest.fixture(scope="module")
def limited_portal(django_db_setup, django_db_blocker, tmp_path_factory) -> Iterator[Stack]:
    """A daphne of its own with this module's limits (another ASGI process)."""
    from django.conf import settings
    from django.db import connection

    if settings.EMBEDDED or connection.vendor != "postgresql":
        pytest.skip("runs against PostgreSQL and Redis: set DATABASE_URL and REDIS_URL")
    stack = Stack(
        tmp_path_factory.mktemp("limited"),
        database_url_of(connection.settings_dict),
        settings.REDIS_URL,
        extra_env={
            "DESKPOOL_SESSION_RATE_BURST": str(BURST),
            "DESKPOOL_SESSION_RATE_PERIOD_S": str(PERIOD_S),
        },
    )
    try:
        stack.start_portal()
        yield stack
    finally:
        stack.close()


def test_two_portal_processes_share_one_count(limited_portal, transactional_db, make_user, profile):
    """The burst spent through this process; the next request, through another daphne, is
    refused there, as it would be in a fleet of ASGI processes."""
    person = make_user("rory")
    here = api_for(person)
    for _ in range(BURST):
        created = submit(here, profile)
        assert created.status_code == 201
        here.post(f"/api/v1/sessions/{created.json()['id']}/stop/")
    _token, plain = issue_token(person)
    there = httpx.post(
        f"{limited_portal.url}/api/v1/sessions/",
        json={"profile": profile.pk, "purpose": "hobby"},
        headers={"Authorization": f"Token {plain}"},
        timeout=30,
    )
    assert there.status_code == 429, there.text
    assert int(there.headers["Retry-After"]) > 0
    assert Session.objects.filter(user=person).count() == BURST
