"""A client polling its own session (``GET /api/v1/sessions/<id>/`` every 2 s, two hundred
of them at a class start) costs three queries, none of them django-guardian's. Granted
sessions stay readable: test_permissions.test_a_guardian_grant_lets_an_instructor_read..."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from scheduling.choices import SessionState
from scheduling.models import Session
from scheduling.services.api_tokens import issue_token
from scheduling.services.cycle import do_scheduling_cycle
from scheduling.services.sessions import check_submit, do_submit

pytestmark = pytest.mark.django_db


def client_of(user) -> APIClient:
    _, plain = issue_token(user, "poll")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {plain}")
    return client


def test_polling_ones_own_session_is_three_queries_without_the_grants(owner, profile):
    session = Session.objects.create(user=owner, profile=profile, purpose="hobby")
    client = client_of(owner)
    client.get(f"/api/v1/sessions/{session.pk}/")  # the token's last use noted once
    with CaptureQueriesContext(connection) as queries:
        answer = client.get(f"/api/v1/sessions/{session.pk}/")
    assert answer.status_code == 200 and answer.json()["id"] == session.pk
    sql = [q["sql"] for q in queries.captured_queries]
    assert not [s for s in sql if "guardian" in s], sql
    # the token with its person and their preferences, the session, its holds
    assert len(sql) == 3, sql


def test_polling_a_placed_desktop_reads_its_slices_and_gpus_in_one_query(owner, profile, pool):
    """A placed desktop's answer names its GPU and slice: its allocations, their slices and
    their GPUs in one query (``scheduling.events.payload_reads``), not one per level."""
    do_submit(owner, check_submit(owner, profile.pk, "hobby", None))
    do_scheduling_cycle()
    session = Session.objects.get(user=owner)
    assert session.state == SessionState.PLACED
    client = client_of(owner)
    client.get(f"/api/v1/sessions/{session.pk}/")
    with CaptureQueriesContext(connection) as queries:
        answer = client.get(f"/api/v1/sessions/{session.pk}/")
    assert answer.status_code == 200 and answer.json()["slice"], answer.json()
    sql = [q["sql"] for q in queries.captured_queries]
    assert len(sql) == 3, sql
    assert 'JOIN "scheduling_gpu"' in sql[-1], sql[-1]
