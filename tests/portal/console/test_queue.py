"""The console's queue page: the waiting requests by tier with their reasons; cancel and
boost, each audited with who and why; a boosted request goes first within its tier.

Real PostgreSQL; the pool is the conftest's ten slices."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from scheduling import engine
from scheduling.choices import AuditKind, SessionState
from scheduling.engine.planner import order_key
from scheduling.models import AuditEvent, Session
from scheduling.services.cycle import do_scheduling_cycle
from scheduling.services.lifecycle import do_transition
from scheduling.services.sessions import check_submit, do_submit
from tests.conftest import give_thesis_grant

pytestmark = pytest.mark.django_db

S = SessionState


def submit(user, profile, purpose="hobby") -> Session:
    if purpose == "thesis":
        give_thesis_grant(user)
    return do_submit(user, check_submit(user, profile.pk, purpose, None))


def fill_pool(make_user, profile) -> list[Session]:
    """All ten slices running young hobby desktops (inside the protected runtime)."""
    sessions = [submit(make_user(f"filler{i}"), profile) for i in range(10)]
    do_scheduling_cycle()
    for s in Session.objects.filter(state=S.PLACED):
        do_transition(s.pk, S.RUNNING, actor="test", started_at=timezone.now())
    assert Session.objects.filter(state=S.RUNNING).count() == 10
    return sessions


def admin_client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_the_queue_page_is_404_for_everyone_but_admins(owner, profile):
    waiting = submit(owner, profile)
    assert Client().get("/console/queue/").status_code == 404
    student = admin_client(owner)
    assert student.get("/console/queue/").status_code == 404
    assert student.get("/console/queue/fragment/").status_code == 404
    reply = student.post(f"/console/queue/{waiting.pk}/cancel/", {"reason": "x"})
    assert reply.status_code == 404
    assert student.post(f"/console/queue/{waiting.pk}/boost/", {"reason": "x"}).status_code == 404
    waiting.refresh_from_db()
    assert waiting.state == S.QUEUED and waiting.boosted_at is None


def test_the_queue_shows_each_tier_with_its_requests_and_reasons(
    make_user, owner, stranger, admin_user, profile, pool
):
    fill_pool(make_user, profile)
    thesis = submit(owner, profile, "thesis")
    do_scheduling_cycle()
    thesis.refresh_from_db()
    assert thesis.state == S.QUEUED and thesis.reason
    page = admin_client(admin_user).get("/console/queue/")
    assert page.status_code == 200
    html = page.content.decode()
    for heading in ("Thesis", "Coursework", "Hobby"):
        assert heading in html
    entry = html.split(f'id="queue-entry-{thesis.pk}"')[1].split("</li>")[0]
    assert "ada" in entry and profile.name in entry
    assert str(thesis.reason) in entry
    assert html.index('id="tier-thesis"') < html.index(f'id="queue-entry-{thesis.pk}"')
    assert html.index(f'id="queue-entry-{thesis.pk}"') < html.index('id="tier-coursework"')
    assert f'for="boost-reason-{thesis.pk}"' in html
    assert "queue-live-data" in html and "/console/queue/fragment/" in html
    fragment = admin_client(admin_user).get("/console/queue/fragment/")
    assert fragment.status_code == 200
    assert f'id="queue-entry-{thesis.pk}"' in fragment.content.decode()
    assert "<html" not in fragment.content.decode()


def test_the_queue_speaks_the_viewers_language(owner, admin_user, profile):
    submit(owner, profile)
    page = admin_client(admin_user).get("/console/queue/", HTTP_ACCEPT_LANGUAGE="zh-hans")
    assert page.status_code == 200
    assert 'lang="zh-hans"' in page.content.decode()


def test_cancel_needs_a_reason_and_is_audited_with_who_and_why(owner, admin_user, profile):
    waiting = submit(owner, profile)
    client = admin_client(admin_user)
    refused = client.post(f"/console/queue/{waiting.pk}/cancel/", {"reason": " "})
    assert refused.status_code == 400
    assert "reason" in refused.content.decode().lower()
    waiting.refresh_from_db()
    assert waiting.state == S.QUEUED
    done = client.post(f"/console/queue/{waiting.pk}/cancel/", {"reason": "duplicate request"})
    assert done.status_code == 302
    waiting.refresh_from_db()
    assert waiting.state == S.CANCELLED
    event = AuditEvent.objects.get(kind=AuditKind.SESSION_CANCELLED, session_id=waiting.pk)
    assert event.actor == "user:root"
    assert event.data["reason"] == "duplicate request"
    assert event.data["before"] == S.QUEUED and event.data["after"] == S.CANCELLED
    # The transition itself is written too, by the admin.
    assert AuditEvent.objects.filter(
        kind=AuditKind.SESSION_TRANSITION, session_id=waiting.pk, actor="user:root"
    ).exists()
    again = client.post(f"/console/queue/{waiting.pk}/cancel/", {"reason": "again"})
    assert again.status_code == 400
    assert "no longer waiting" in again.content.decode()


def test_boost_is_audited_and_refused_twice(owner, admin_user, profile):
    waiting = submit(owner, profile)
    client = admin_client(admin_user)
    assert client.post(f"/console/queue/{waiting.pk}/boost/", {"reason": ""}).status_code == 400
    done = client.post(f"/console/queue/{waiting.pk}/boost/", {"reason": "exam tomorrow"})
    assert done.status_code == 302
    waiting.refresh_from_db()
    assert waiting.boosted_at is not None
    event = AuditEvent.objects.get(kind=AuditKind.SESSION_BOOSTED, session_id=waiting.pk)
    assert event.actor == "user:root" and event.data["reason"] == "exam tomorrow"
    assert event.data["before"]["boosted_at"] is None and event.data["after"]["boosted_at"]
    twice = client.post(f"/console/queue/{waiting.pk}/boost/", {"reason": "again"})
    assert twice.status_code == 400
    assert AuditEvent.objects.filter(kind=AuditKind.SESSION_BOOSTED).count() == 1


def test_a_boosted_request_is_placed_before_an_older_one_of_its_tier(
    make_user, owner, stranger, admin_user, profile, pool
):
    fillers = fill_pool(make_user, profile)
    older = submit(owner, profile, "thesis")
    newer = submit(stranger, profile, "thesis")
    Session.objects.filter(pk=older.pk).update(created_at=timezone.now() - timedelta(hours=1))
    do_scheduling_cycle()
    older.refresh_from_db()
    newer.refresh_from_db()
    assert older.queue_position < newer.queue_position  # older first, unboosted
    reply = admin_client(admin_user).post(
        f"/console/queue/{newer.pk}/boost/", {"reason": "deadline tonight"}
    )
    assert reply.status_code == 302
    do_scheduling_cycle()
    newer.refresh_from_db()
    older.refresh_from_db()
    assert newer.queue_position < older.queue_position
    # One slice frees: the boosted request takes it.
    do_transition(fillers[0].pk, S.ENDED, actor="test")
    do_scheduling_cycle()
    newer.refresh_from_db()
    older.refresh_from_db()
    assert newer.state == S.PLACED
    assert older.state == S.QUEUED


def test_the_engine_orders_a_boost_within_its_tier_only():
    now = timezone.now()
    policy = engine.Policy()

    def request(session_id, tier, submitted_minutes_ago, boosted=None):
        return engine.QueuedRequest(
            session_id=session_id,
            tier=tier,
            submitted_at=now - timedelta(minutes=submitted_minutes_ago),
            gpu_count=1,
            gpu_memory_min_mb=0,
            allowed_kinds=("mig",),
            cpus=1,
            memory_mb=1024,
            boosted_at=boosted,
        )

    old_hobby = request(1, 3, 60)
    boosted_hobby = request(2, 3, 1, boosted=now)
    thesis = request(3, 1, 1)
    later_boost = request(4, 3, 1, boosted=now + timedelta(seconds=1))
    ordered = sorted(
        [old_hobby, boosted_hobby, thesis, later_boost],
        key=lambda r: order_key(r, r.tier, now, policy),
    )
    assert [r.session_id for r in ordered] == [3, 2, 4, 1]
