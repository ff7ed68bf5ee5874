"""The audit trail is append-only, enforced by the database (docs/audit.md): on PostgreSQL
(the tests' database) and on SQLite (the embedded default, migrated afresh in a subprocess);
no admin path changes it; deleting sessions, users and nodes leaves their events; only the
retention task deletes, and only old events; events carry the client's address; a blocked
request's unchanged reason is written once."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from django.db import IntegrityError, connection, transaction
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from scheduling.choices import AuditKind
from scheduling.engine import QueueEntry
from scheduling.engine.reasons import Code, Reason
from scheduling.models import AuditEvent, AuditRetention, Node, Quota, Session
from scheduling.services import ServiceError
from scheduling.services.audit import do_prune_audit, record, requests_from
from scheduling.services.cycle import do_scheduling_cycle
from scheduling.services.placement import apply_queue
from scheduling.services.sessions import check_submit, do_submit

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[2]


def event(days_ago: float = 0, **fields) -> AuditEvent:
    return record(
        AuditKind.POLICY_CHANGED,
        "user:test",
        data={"n": 1},
        at=timezone.now() - timedelta(days=days_ago),
        **fields,
    )


def refused(action) -> None:
    """``action`` is refused by the database (a savepoint keeps the test's transaction)."""
    with pytest.raises(IntegrityError, match="append-only"), transaction.atomic():
        action()


# -- PostgreSQL -----------------------------------------------------------------------------


def test_postgresql_refuses_update_and_delete_of_events_in_sql():
    assert connection.vendor == "postgresql"
    kept = event()
    old = event(days_ago=1000)  # older than any retention, but no retention row says so

    def sql(statement: str):
        def run():
            with connection.cursor() as cursor:
                cursor.execute(statement, [kept.pk])

        return run

    refused(sql("UPDATE scheduling_auditevent SET actor = 'user:mallory' WHERE id = %s"))
    refused(sql("DELETE FROM scheduling_auditevent WHERE id = %s"))
    refused(lambda: AuditEvent.objects.filter(pk=old.pk).delete())
    assert AuditEvent.objects.get(pk=kept.pk).actor == "user:test"


def test_the_orm_update_delete_and_save_of_events_raise():
    first = event()
    refused(lambda: AuditEvent.objects.update(actor="user:mallory"))
    refused(lambda: AuditEvent.objects.all().delete())
    refused(first.delete)
    first.data = {"n": 2}
    refused(first.save)
    first.refresh_from_db()
    assert first.data == {"n": 1} and first.actor == "user:test"


# -- SQLite (the embedded default) ----------------------------------------------------------


def test_sqlite_refuses_update_and_delete_after_the_migrations(tmp_path):
    database = tmp_path / "embedded.sqlite3"
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    env.update(DATABASE_URL=f"sqlite:///{database}", DESKPOOL_VAR_DIR=str(tmp_path))
    done = subprocess.run(
        [sys.executable, "manage.py", "migrate", "--no-input", "-v", "0"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr

    db = sqlite3.connect(database, isolation_level=None)
    # The embedded default runs in write-ahead-log mode (portal/settings.py), kept in the file.
    assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    insert = (
        "INSERT INTO scheduling_auditevent (at, kind, actor, data) "
        "VALUES (datetime('now', ?), 'policy.changed', 'user:test', '{}')"
    )
    db.execute(insert, ["-1000 days"])
    db.execute(insert, ["-10 days"])
    for statement in (
        "UPDATE scheduling_auditevent SET actor = 'user:mallory'",
        "DELETE FROM scheduling_auditevent",
    ):
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            db.execute(statement)
    with pytest.raises(sqlite3.IntegrityError, match="audit_retention_at_least_6_months"):
        db.execute("INSERT INTO scheduling_auditretention (days) VALUES (182)")
    # The retention row (as the task writes it) lets only the old event go.
    db.execute("INSERT INTO scheduling_auditretention (days) VALUES (365)")
    with pytest.raises(sqlite3.IntegrityError, match="append-only"):
        db.execute("DELETE FROM scheduling_auditevent")
    db.execute("DELETE FROM scheduling_auditevent WHERE at < datetime('now', '-365 days')")
    assert db.execute("SELECT count(*) FROM scheduling_auditevent").fetchone() == (1,)
    with pytest.raises(sqlite3.IntegrityError, match="append-only"):
        db.execute("UPDATE scheduling_auditevent SET at = datetime('now', '-2000 days')")
    db.close()


# -- the admin ------------------------------------------------------------------------------


def test_the_admin_shows_events_but_has_no_add_change_or_delete(admin_user):
    shown = event()
    client = Client()
    client.force_login(admin_user)
    base = "/admin/scheduling/auditevent/"
    listing = client.get(base)
    assert listing.status_code == 200 and "delete_selected" not in listing.content.decode()
    assert client.get(f"{base}{shown.pk}/change/").status_code == 200  # to look at
    assert client.get(f"{base}add/").status_code == 403
    assert client.post(f"{base}add/", {"kind": "policy.changed", "actor": "x"}).status_code == 403
    assert client.post(f"{base}{shown.pk}/change/", {"actor": "x"}).status_code == 403
    assert client.get(f"{base}{shown.pk}/delete/").status_code == 403
    assert client.post(f"{base}{shown.pk}/delete/", {"post": "yes"}).status_code == 403
    bulk = client.post(base, {"action": "delete_selected", "_selected_action": [shown.pk]})
    assert bulk.status_code in (200, 302)
    assert AuditEvent.objects.get(pk=shown.pk).actor == "user:test"


# -- deletions do not cascade ---------------------------------------------------------------


def test_deleting_a_session_a_user_and_a_node_keeps_their_events(make_user, owner, profile, pool):
    mine = do_submit(owner, check_submit(owner, profile.pk, "hobby", None))
    theirs_user = make_user("cy")
    theirs = do_submit(theirs_user, check_submit(theirs_user, profile.pk, "hobby", None))
    node_event = record(AuditKind.NODE_CORDONED, "user:root", node=pool)
    before = {
        e.pk: (e.session_id, e.node_id, e.actor)
        for e in AuditEvent.objects.filter(session__in=[mine.pk, theirs.pk])
    } | {node_event.pk: (None, pool.pk, "user:root")}
    assert len(before) >= 3

    Session.objects.filter(pk=mine.pk).delete()
    theirs_user.delete()  # cascades to the user's sessions
    Node.objects.filter(pk=pool.pk).delete()

    assert not Session.objects.filter(pk__in=[mine.pk, theirs.pk]).exists()
    after = {
        e.pk: (e.session_id, e.node_id, e.actor) for e in AuditEvent.objects.filter(pk__in=before)
    }
    assert after == before
    assert AuditEvent.objects.get(session_id=theirs.pk, kind=AuditKind.SESSION_SUBMITTED).actor == (
        "user:cy"
    )


# -- retention ------------------------------------------------------------------------------


def test_retention_deletes_only_events_older_than_the_period_and_records_it(settings):
    settings.AUDIT_RETENTION_DAYS = 365
    old, recent = event(days_ago=400), event(days_ago=300)
    assert do_prune_audit() == 1
    assert not AuditEvent.objects.filter(pk=old.pk).exists()
    assert AuditEvent.objects.filter(pk=recent.pk).exists()
    pruned = AuditEvent.objects.get(kind=AuditKind.AUDIT_PRUNED)
    assert pruned.data["deleted"] == 1 and pruned.data["days"] == 365
    assert AuditRetention.objects.get().days == 365
    # The row the trigger reads does not open the recent events to a plain delete.
    refused(lambda: AuditEvent.objects.filter(pk=recent.pk).delete())
    # A longer period later: still only what is older than it.
    assert do_prune_audit(days=250) == 1
    assert not AuditEvent.objects.filter(pk=recent.pk).exists()
    assert AuditRetention.objects.get().days == 250


def test_retention_under_six_months_is_refused_by_the_service_and_the_database():
    event(days_ago=200)
    with pytest.raises(ServiceError) as error:
        do_prune_audit(days=182)
    assert error.value.field == "days" and "183" in error.value.message
    with pytest.raises(IntegrityError), transaction.atomic():
        AuditRetention.objects.create(days=182)
    assert AuditEvent.objects.count() == 1


def test_the_retention_task_is_a_named_periodic_task():
    from portal.celery import app
    from scheduling.tasks import prune_audit

    app.loader.import_default_modules()
    app.finalize()
    assert "audit-retention" in app.conf.beat_schedule
    assert app.conf.beat_schedule["audit-retention"]["task"] == prune_audit.name


def test_settings_refuse_a_retention_under_six_months():
    env = {k: v for k, v in os.environ.items()}
    env["DESKPOOL_AUDIT_RETENTION_DAYS"] = "100"
    done = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        cwd=ROOT,
        env={**env, "DJANGO_SETTINGS_MODULE": "portal.settings"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0 and "DESKPOOL_AUDIT_RETENTION_DAYS" in done.stderr


# -- what is written ------------------------------------------------------------------------


def test_the_address_of_a_page_post_is_recorded(owner, profile, settings):
    client = Client(HTTP_ACCEPT_LANGUAGE="en", REMOTE_ADDR="192.0.2.7")
    client.force_login(owner)
    answer = client.post("/sessions/new/", {"profile": profile.pk, "purpose": "hobby"})
    assert answer.status_code == 302
    submitted = AuditEvent.objects.get(kind=AuditKind.SESSION_SUBMITTED)
    assert submitted.address == "192.0.2.7"

    # X-Forwarded-For counts only behind a trusted proxy, and then its right-most entry.
    session = Session.objects.get()
    forged = {"HTTP_X_FORWARDED_FOR": "203.0.113.9, 198.51.100.4"}
    settings.TRUSTED_PROXIES = 1
    client.post(f"/sessions/{session.pk}/cancel/", **forged)
    cancelled = AuditEvent.objects.filter(kind=AuditKind.SESSION_TRANSITION).latest("pk")
    assert cancelled.data["to"] == "CANCELLED" and cancelled.address == "198.51.100.4"
    settings.TRUSTED_PROXIES = 0
    second = client.post("/sessions/new/", {"profile": profile.pk, "purpose": "hobby"}, **forged)
    assert second.status_code == 302
    assert AuditEvent.objects.filter(kind=AuditKind.SESSION_SUBMITTED).latest("pk").address == (
        "192.0.2.7"
    )


def test_the_address_of_an_api_call_is_recorded(owner, profile):
    client = APIClient(REMOTE_ADDR="2001:db8::42")
    client.force_login(owner)
    made = client.post("/api/v1/sessions/", {"profile": profile.pk, "purpose": "hobby"})
    assert made.status_code == 201, made.content
    assert client.post(f"/api/v1/sessions/{made.json()['id']}/stop/").status_code == 200
    events = AuditEvent.objects.filter(session_id=made.json()["id"])
    assert {e.kind for e in events} >= {AuditKind.SESSION_SUBMITTED, AuditKind.SESSION_TRANSITION}
    assert {e.address for e in events} == {"2001:db8::42"}


def test_events_outside_requests_have_no_address_and_requests_from_sets_one():
    assert event().address is None
    with requests_from("2001:db8::1"):
        assert event().address == "2001:db8::1"
    assert event().address is None


def test_a_blocked_requests_unchanged_reason_is_written_once_over_three_cycles(
    owner, profile, pool
):
    Quota.objects.create(scope="user", key="*", max_sessions=1)
    first = do_submit(owner, check_submit(owner, profile.pk, "hobby", None))
    second = do_submit(owner, check_submit(owner, profile.pk, "hobby", None))
    for _ in range(3):
        do_scheduling_cycle()
    second.refresh_from_db()
    assert second.blocked
    blocked = AuditEvent.objects.filter(kind=AuditKind.SESSION_BLOCKED, session_id=second.pk)
    assert blocked.count() == 1
    assert blocked.get().data["blocked"] is True
    assert blocked.get().data["reason_code"] == second.reason_code
    # The first one was placed: no blocked decision for it.
    assert not AuditEvent.objects.filter(kind=AuditKind.SESSION_BLOCKED, session_id=first.pk)


def test_a_queued_decision_is_written_when_its_reason_changes_not_its_position_or_eta(
    owner, profile
):
    waiting = do_submit(owner, check_submit(owner, profile.pk, "hobby", None))
    decisions = AuditEvent.objects.filter(kind=AuditKind.SESSION_BLOCKED, session_id=waiting.pk)
    soon = timezone.now() + timedelta(minutes=30)
    behind_two = Reason(Code.WAITING, {"tier": "hobby", "ahead": 2})
    apply_queue([QueueEntry(waiting.pk, 3, behind_two, eta=soon)])
    assert decisions.count() == 1
    # The position and the ETA move (the session is updated), the reason does not.
    apply_queue([QueueEntry(waiting.pk, 2, behind_two, eta=soon + timedelta(minutes=7))])
    waiting.refresh_from_db()
    assert waiting.queue_position == 2 and decisions.count() == 1
    # One fewer ahead: the same decision, not written again (however long the queue).
    apply_queue([QueueEntry(waiting.pk, 1, Reason(Code.WAITING, {"tier": "hobby", "ahead": 1}))])
    assert decisions.count() == 1
    # A new reason, then blocked by a quota: each one written.
    held = Reason(Code.WAITING_HELD, {"tier": "hobby", "ahead": 1})
    apply_queue([QueueEntry(waiting.pk, 1, held)])
    blocked = Reason(Code.QUOTA_GPU_HOURS, {"limit": 5, "used": 6.0})
    apply_queue([QueueEntry(waiting.pk, 0, blocked, blocked=True)])
    apply_queue([QueueEntry(waiting.pk, 0, blocked, blocked=True)])
    assert [(e.data["reason_code"], e.data["blocked"]) for e in decisions.order_by("pk")] == [
        ("waiting", False),
        ("waiting_held", False),
        ("quota_gpu_hours", True),
    ]
