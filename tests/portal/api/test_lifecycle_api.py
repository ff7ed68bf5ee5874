"""The session resource's time limit and idle verdict, and POST extend/ and resume/
(docs/lifecycle.md; later checks rely on them)."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from django.utils import timezone

from scheduling.models import DesktopProfile, Session
from scheduling.services.idle import do_idle_sweep
from scheduling.services.session_activity import record_usage
from tests.scheduling.test_lifecycle import run_desktop, started_ago

from .test_api import client_for

pytestmark = [pytest.mark.django_db, pytest.mark.lifecycle]


def at(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def test_the_session_carries_ends_at_and_the_idle_verdict(owner, profile, pool):
    session = run_desktop(owner, profile)
    body = client_for(owner).get(f"/api/v1/sessions/{session.pk}/").json()
    assert at(body["ends_at"]) == session.started_at + timedelta(minutes=240)
    assert body["idle"] == {"state": "active", "since": None, "suspends_at": None}
    queued = client_for(owner).post(
        "/api/v1/sessions/", {"profile": profile.pk, "purpose": "hobby"}, format="json"
    )
    assert queued.json()["ends_at"] is None and queued.json()["idle"]["state"] == "active"


def test_extend_answers_the_new_limit_then_409_with_the_reason(owner, profile, pool):
    DesktopProfile.objects.filter(pk=profile.pk).update(max_total_minutes=300)
    session = run_desktop(owner, profile)
    api = client_for(owner)
    answer = api.post(f"/api/v1/sessions/{session.pk}/extend/")
    assert answer.status_code == 200, answer.content
    assert at(answer.json()["ends_at"]) == session.started_at + timedelta(minutes=300)
    refused = api.post(f"/api/v1/sessions/{session.pk}/extend/")
    assert refused.status_code == 409
    assert "past its profile's maximum of 300 minutes" in refused.json()["detail"]


def test_resume_requeues_a_suspended_session_and_refuses_a_running_one(owner, profile, pool):
    session = run_desktop(owner, profile)
    api = client_for(owner)
    assert api.post(f"/api/v1/sessions/{session.pk}/resume/").status_code == 409
    started_ago(session, 40)
    now = timezone.now()
    for moment in (now, now + timedelta(minutes=15)):
        record_usage(session.pk, 0.0, 0.0, at=moment)
        do_idle_sweep(moment)
    body = api.get(f"/api/v1/sessions/{session.pk}/").json()
    assert body["state"] == "SUSPENDED" and body["idle"]["state"] == "suspended"
    assert at(body["idle"]["since"]) == now + timedelta(minutes=15)
    answer = api.post(f"/api/v1/sessions/{session.pk}/resume/")
    assert answer.status_code == 200, answer.content
    assert answer.json()["state"] == "QUEUED"
    assert Session.objects.get(pk=session.pk).created_at == session.created_at


def test_another_persons_session_is_404_for_extend_and_resume(owner, stranger, profile, pool):
    session = run_desktop(owner, profile)
    api = client_for(stranger)
    for verb in ("extend", "resume"):
        assert api.post(f"/api/v1/sessions/{session.pk}/{verb}/").status_code == 404
    assert api.post("/api/v1/sessions/nope/extend/").status_code == 404
    assert Session.objects.get(pk=session.pk).extended_minutes == 0
