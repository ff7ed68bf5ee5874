"""An agent's batch of RUNNING reports, applied together (``lifecycle.do_start_many``): the
same sessions, usage records, audit events and broadcasts as one by one, in a number of
queries that does not grow with the batch, and one by one again when a session changed."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from scheduling.choices import AuditKind, SessionState
from scheduling.engine.reasons import Code, Reason
from scheduling.models import AuditEvent, Session, UsageRecord
from scheduling.services import agent_sessions
from scheduling.services.cycle import do_scheduling_cycle
from scheduling.services.lifecycle import do_transition
from scheduling.services.sessions import check_submit, do_submit

from ..conftest import give_thesis_grant, gpu_inventory

pytestmark = pytest.mark.django_db


def agent(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Node " + token)
    return client


def placed(make_user, profile, register_node, count: int, host: str = "gpu-b"):
    """``count`` sessions of different people placed on one node; (node, token, desired)."""
    node, token = register_node(host, [gpu_inventory(f"GPU-{host}", 0, mig_slices=count)])
    for n in range(count):
        person = make_user(f"{host}-{n}")
        give_thesis_grant(person)
        do_submit(person, check_submit(person, profile.pk, "thesis", None))
    do_scheduling_cycle()
    desired = agent(token).get("/api/agent/v1/desired/").json()["sessions"]
    assert len(desired) == count
    return node, token, desired


def running(desired, *, starting=True) -> list[dict]:
    """Each desktop's STARTING (if asked) and RUNNING, with a port and a reason of its own."""
    reports = []
    for n, d in enumerate(desired):
        base = {"session_id": d["session_id"], "placement": d["placement"]}
        if starting:
            reports.append({**base, "state": "STARTING"})
        reason = f"desktop {n}" if n % 2 else ""
        sound = {"audio_port": 33000 + n} if n % 2 == 0 else {}  # an image with sound, or not
        reports.append({**base, "state": "RUNNING", "port": 32000 + n, "reason": reason, **sound})
    return reports


def test_a_batch_of_running_reports_is_applied_as_one_by_one(
    make_user, profile, register_node, django_capture_on_commit_callbacks
):
    node, token, desired = placed(make_user, profile, register_node, 4)
    # One of them already STARTING (reported in an earlier batch): its audit says so.
    first = desired[0]["session_id"]
    do_transition(first, SessionState.STARTING, actor="node:gpu-b")
    node.failures_in_a_row = 2
    node.save(update_fields=["failures_in_a_row"])
    with django_capture_on_commit_callbacks(execute=True) as hooks:
        answer = agent(token).post(
            "/api/agent/v1/reports/", {"reports": running(desired)}, format="json"
        )
    assert answer.status_code == 200, answer.content
    results = answer.json()["results"]
    assert [(r["outcome"], r["state"]) for r in results] == [("applied", "RUNNING")] * 8
    assert hooks  # the broadcasts go after the commit
    for n, d in enumerate(desired):
        session = Session.objects.get(pk=d["session_id"])
        assert session.state == SessionState.RUNNING
        assert (session.desktop_host, session.desktop_port) == (node.address, 32000 + n)
        assert session.desktop_audio_port == (33000 + n if n % 2 == 0 else None)
        assert session.started_at is not None
        # Each its own reason: the agent's words, or none.
        expected = ("agent", {"detail": f"desktop {n}"}) if n % 2 else ("", {})
        assert (session.reason_code, session.reason_params) == expected
        [run] = UsageRecord.objects.filter(session=session)
        assert (run.run, run.ended_at, run.node_hostname, run.slices) == (1, None, "gpu-b", 1)
        assert run.started_at == session.started_at
        moves = AuditEvent.objects.filter(session=session, kind=AuditKind.SESSION_TRANSITION)
        last = moves.order_by("pk").last()
        assert (last.actor, last.node_id, last.data["to"]) == ("node:gpu-b", node.pk, "RUNNING")
        assert last.data["from"] == ("STARTING" if d["session_id"] == first else "PLACED")
    node.refresh_from_db()
    assert node.failures_in_a_row == 0  # a desktop reached RUNNING here

    # The same reports again: nothing changes (no second run, no second transition).
    again = agent(token).post(
        "/api/agent/v1/reports/", {"reports": running(desired)}, format="json"
    )
    assert {r["state"] for r in again.json()["results"]} == {"RUNNING"}
    assert UsageRecord.objects.filter(session__node=node).count() == 4
    assert (
        AuditEvent.objects.filter(kind=AuditKind.SESSION_TRANSITION, data__to="RUNNING").count()
        == 4
    )


def test_the_queries_do_not_grow_with_the_batch(make_user, profile, register_node):
    counts = []
    for size, host in ((2, "gpu-a"), (7, "gpu-b")):
        node, token, desired = placed(make_user, profile, register_node, size, host)
        with CaptureQueriesContext(connection) as queries:
            answer = agent(token).post(
                "/api/agent/v1/reports/", {"reports": running(desired)}, format="json"
            )
        assert answer.status_code == 200
        counts.append(len(queries))  # (the first node is full: the second gets the 7)
    assert counts[0] == counts[1], counts


STARTED = Reason(Code.STARTING)


def starting_alone(desired) -> list[dict]:
    """The desktops' STARTING, each the last report about its session in its batch (its
    RUNNING goes in the next one, as an agent sends while the portal answers)."""
    return [
        {"session_id": d["session_id"], "placement": d["placement"], "state": "STARTING"}
        for d in desired
    ]


def test_starting_reports_alone_are_applied_together_as_one_by_one(
    make_user, profile, register_node
):
    node, token, desired = placed(make_user, profile, register_node, 3)
    already = desired[2]["session_id"]
    do_transition(already, SessionState.STARTING, actor="node:gpu-b", reason=STARTED)
    with CaptureQueriesContext(connection) as queries:
        answer = agent(token).post(
            "/api/agent/v1/reports/", {"reports": starting_alone(desired)}, format="json"
        )
    assert answer.status_code == 200, answer.content
    results = [(r["outcome"], r["state"]) for r in answer.json()["results"]]
    assert results == [("applied", "STARTING")] * 3
    for d in desired:
        session = Session.objects.get(pk=d["session_id"])
        assert session.state == SessionState.STARTING
        assert (session.reason_code, session.started_at) == ("starting", None)
        moves = AuditEvent.objects.filter(session=session, kind=AuditKind.SESSION_TRANSITION)
        assert [(m.actor, m.data["from"], m.data["to"]) for m in moves.order_by("pk")] == [
            ("scheduler", "QUEUED", "PLACED"),
            ("node:gpu-b", "PLACED", "STARTING"),
        ]
    # The one already STARTING was read, not moved again; the two PLACED moved in one go.
    assert not UsageRecord.objects.filter(session__node=node).exists()
    updates = [q["sql"] for q in queries.captured_queries if "UPDATE" in q["sql"]]
    moves = [sql for sql in updates if sql.startswith('UPDATE "scheduling_session"')]
    assert len(moves) == 1, [sql[:120] for sql in updates]

    # Their RUNNING in the next batch: applied together too.
    answer = agent(token).post(
        "/api/agent/v1/reports/", {"reports": running(desired, starting=False)}, format="json"
    )
    assert [r["state"] for r in answer.json()["results"]] == ["RUNNING"] * 3


def test_a_session_that_changed_meanwhile_is_applied_one_by_one(
    make_user, profile, register_node, monkeypatch
):
    """The batch read a session PLACED, then its owner stopped it before the update: the
    others still become RUNNING, that one is answered ``conflict`` (stop that desktop)."""
    node, token, desired = placed(make_user, profile, register_node, 3)
    gone = desired[1]["session_id"]
    read = agent_sessions._plain_starts

    def read_then_stopped(*args):
        plain = read(*args)
        do_transition(gone, SessionState.ENDED, actor="user:x")
        return plain

    monkeypatch.setattr(agent_sessions, "_plain_starts", read_then_stopped)
    answer = agent(token).post(
        "/api/agent/v1/reports/", {"reports": running(desired, starting=False)}, format="json"
    )
    outcomes = [(r["session_id"], r["outcome"], r["state"]) for r in answer.json()["results"]]
    assert outcomes == [
        (desired[0]["session_id"], "applied", "RUNNING"),
        (gone, "conflict", "ENDED"),
        (desired[2]["session_id"], "applied", "RUNNING"),
    ]
    assert not UsageRecord.objects.filter(session_id=gone).exists()


def test_a_run_of_starting_and_running_reports_locks_its_sessions_once(
    make_user, profile, register_node
):
    """Two of the run STARTING (their RUNNING goes in a later batch), two RUNNING: their
    four rows are locked together, once, and each state's part moves from that lock."""
    node, token, desired = placed(make_user, profile, register_node, 4)
    reports = starting_alone(desired[:2]) + running(desired[2:], starting=False)
    with CaptureQueriesContext(connection) as queries:
        answer = agent(token).post("/api/agent/v1/reports/", {"reports": reports}, format="json")
    assert [(r["outcome"], r["state"]) for r in answer.json()["results"]] == [
        ("applied", "STARTING"),
        ("applied", "STARTING"),
        ("applied", "RUNNING"),
        ("applied", "RUNNING"),
    ]
    locks = [q["sql"] for q in queries.captured_queries if q["sql"].endswith("FOR UPDATE")]
    assert len(locks) == 1, locks
    states = dict(Session.objects.filter(node=node).values_list("pk", "state"))
    assert [states[d["session_id"]] for d in desired] == ["STARTING"] * 2 + ["RUNNING"] * 2
