"""Node health: a silent node gets nothing new, a long silence requeues its sessions, and a
node whose desktops keep failing is cordoned until an admin clears it."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.conf import settings
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from scheduling.choices import AuditKind, SessionState
from scheduling.models import Allocation, AuditEvent, Node, Session
from scheduling.services.agent_sessions import do_report
from scheduling.services.cycle import do_scheduling_cycle
from scheduling.services.health import do_sweep_silent_nodes
from scheduling.services.nodes import do_heartbeat
from scheduling.services.sessions import check_submit, do_stop, do_submit

from ..conftest import gpu_inventory

pytestmark = pytest.mark.django_db

S = SessionState


def agent(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Node " + token)
    return client


def submit(user, profile) -> Session:
    return do_submit(user, check_submit(user, profile.pk, "hobby", None))


def silence(node: Node, seconds: float, now=None) -> None:
    """The node's last heartbeat was ``seconds`` before ``now``."""
    now = now or timezone.now()
    Node.objects.filter(pk=node.pk).update(last_heartbeat=now - timedelta(seconds=seconds))


def live_allocations(session: Session) -> int:
    return Allocation.objects.filter(session=session, released_at=None).count()


def test_a_node_silent_past_the_heartbeat_timeout_gets_nothing_new(owner, profile, register_node):
    silent, _ = register_node("gpu-a01", [gpu_inventory("GPU-a", 0, mig_slices=4)])
    healthy, _ = register_node("gpu-b01", [gpu_inventory("GPU-b", 0, mig_slices=4)])
    now = timezone.now()
    silence(silent, settings.NODE_HEARTBEAT_TIMEOUT_S + 5, now)

    sessions = [submit(owner, profile) for _ in range(3)]
    assert do_scheduling_cycle(now).placed == 3

    assert {Session.objects.get(pk=s.pk).node for s in sessions} == {healthy}
    assert do_sweep_silent_nodes(now).nodes == ()  # short of the long silence: nothing moves


def test_a_long_silence_requeues_on_node_sessions_with_their_age_and_ends_stopping_ones(
    owner, stranger, profile, register_node
):
    node, token = register_node("gpu-a01", [gpu_inventory("GPU-a", 0, mig_slices=4)])
    running, starting, placed = (submit(owner, profile) for _ in range(3))
    stopping = submit(stranger, profile)
    do_scheduling_cycle()
    for session in (running, stopping):
        do_report(node, session.pk, {"state": "RUNNING", "port": 32000})
    do_report(node, starting.pk, {"state": "STARTING"})
    do_stop(stranger, Session.objects.get(pk=stopping.pk))
    created = {s.pk: Session.objects.get(pk=s.pk).created_at for s in (running, starting, placed)}

    now = timezone.now()
    silence(node, settings.NODE_LOST_AFTER_S + 1, now)
    result = do_sweep_silent_nodes(now)

    assert (result.nodes, result.requeued, result.ended) == (("gpu-a01",), 3, 1)
    heard_at = timezone.localtime(Node.objects.get(pk=node.pk).last_heartbeat).strftime("%H:%M")
    for pk, created_at in created.items():
        session = Session.objects.get(pk=pk)
        assert session.state == S.QUEUED
        assert session.created_at == created_at  # its age, so its place, is kept
        assert session.node is None and session.desktop_port is None
        assert session.reason.startswith(f"node gpu-a01 stopped answering at {heard_at};")
        assert "requeued" in session.reason
        assert live_allocations(session) == 0
    ended = Session.objects.get(pk=stopping.pk)
    assert ended.state == S.ENDED and "ended" in ended.reason
    assert live_allocations(ended) == 0
    assert AuditEvent.objects.filter(kind=AuditKind.NODE_SILENT, node=node).count() == 1
    requeue = AuditEvent.objects.get(session=running, data__to="QUEUED")
    assert (requeue.actor, requeue.node, requeue.data["released"]) == ("health", node, 1)

    again = do_sweep_silent_nodes(now)
    assert (again.nodes, again.requeued, again.ended) == ((), 0, 0)
    assert agent(token).get("/api/agent/v1/desired/").json()["sessions"] == []


def test_requeued_sessions_are_placed_on_a_healthy_node(owner, profile, register_node):
    lost, _ = register_node("gpu-a01", [gpu_inventory("GPU-a", 0, mig_slices=1)])
    session = submit(owner, profile)
    do_scheduling_cycle()
    healthy, _ = register_node("gpu-b01", [gpu_inventory("GPU-b", 0, mig_slices=1)])
    now = timezone.now()
    silence(lost, settings.NODE_LOST_AFTER_S + 1, now)

    do_sweep_silent_nodes(now)
    do_scheduling_cycle(now)

    session.refresh_from_db()
    assert (session.state, session.node) == (S.PLACED, healthy)
    assert Allocation.objects.get(session=session, released_at=None).node == healthy


def test_a_node_back_from_silence_is_healthy_and_its_stale_reports_get_409(
    owner, profile, register_node
):
    node, token = register_node("gpu-a01", [gpu_inventory("GPU-a", 0, mig_slices=1)])
    session = submit(owner, profile)
    do_scheduling_cycle()
    do_report(node, session.pk, {"state": "RUNNING", "port": 32000})
    now = timezone.now()
    silence(node, settings.NODE_LOST_AFTER_S + 1, now)
    do_sweep_silent_nodes(now)

    do_heartbeat(Node.objects.get(pk=node.pk), {"gpus": [], "running_sessions": [session.pk]})
    assert Node.objects.get(pk=node.pk).is_healthy()

    report = f"/api/agent/v1/sessions/{session.pk}/report/"
    for state in ("RUNNING", "FAILED"):
        stale = agent(token).post(report, {"state": state, "port": 32000}, format="json")
        assert stale.status_code == 409, stale.content
        assert stale.json()["state"] == "QUEUED"
    assert Session.objects.get(pk=session.pk).state == S.QUEUED
    assert Node.objects.get(pk=node.pk).failures_in_a_row == 0  # a refused report counts not


def fail_one(user, profile, token: str, reason: str = "image not found") -> Session:
    session = submit(user, profile)
    do_scheduling_cycle()
    answer = agent(token).post(
        f"/api/agent/v1/sessions/{session.pk}/report/",
        {"state": "FAILED", "reason": reason},
        format="json",
    )
    assert answer.json() == {"state": "FAILED"}
    return session


def test_failed_starts_within_ten_minutes_cordon_the_node_and_the_admin_action_clears_it(
    owner, admin_user, profile, register_node
):
    node, token = register_node("gpu-a01", [gpu_inventory("GPU-a", 0, mig_slices=1)])
    for _ in range(settings.CORDON_AFTER_FAILURES - 1):
        fail_one(owner, profile, token)
    assert not Node.objects.get(pk=node.pk).cordoned
    fail_one(owner, profile, token)

    node.refresh_from_db()
    assert (node.cordoned, node.cordon_reason) == (True, "start_failures")
    assert not node.is_healthy()
    cordon = AuditEvent.objects.get(kind=AuditKind.NODE_CORDONED, node=node)
    assert cordon.data == {
        "failures": settings.CORDON_AFTER_FAILURES,
        "window_s": 600,
        "cause": "start_failures",
    }
    waiting = submit(owner, profile)
    do_scheduling_cycle()
    assert Session.objects.get(pk=waiting.pk).state == S.QUEUED

    browser = Client()
    browser.force_login(admin_user)
    answer = browser.post(
        "/admin/scheduling/node/",
        {"action": "clear_cordon", "_selected_action": [node.pk]},
        follow=True,
    )
    assert answer.status_code == 200
    assert "Cordon cleared on gpu-a01." in answer.content.decode()

    node.refresh_from_db()
    assert (node.cordoned, node.failures_in_a_row) == (False, 0)
    cleared = AuditEvent.objects.get(kind=AuditKind.NODE_CORDON_CLEARED, node=node)
    assert cleared.actor == "user:root"
    do_scheduling_cycle()
    assert Session.objects.get(pk=waiting.pk).state == S.PLACED


def test_failed_starts_spread_over_more_than_ten_minutes_do_not_cordon(
    owner, profile, register_node
):
    node, token = register_node("gpu-a01", [gpu_inventory("GPU-a", 0, mig_slices=1)])
    # the earlier failures happened eleven minutes ago: out of the window (the audit trail is
    # append-only, so they are written with that time rather than moved back)
    for _ in range(settings.CORDON_AFTER_FAILURES - 1):
        AuditEvent.objects.create(
            kind=AuditKind.SESSION_TRANSITION,
            actor="test",
            node=node,
            data={"to": SessionState.FAILED},
            at=timezone.now() - timedelta(minutes=11),
        )
    good = submit(owner, profile)
    do_scheduling_cycle()
    do_report(node, good.pk, {"state": "RUNNING", "port": 32000})
    do_report(node, good.pk, {"state": "ENDED"})
    fail_one(owner, profile, token)

    node.refresh_from_db()
    assert (node.cordoned, node.failures_in_a_row) == (False, 1)
    assert not AuditEvent.objects.filter(kind=AuditKind.NODE_CORDONED, node=node).exists()


def test_the_sweep_has_a_named_beat_entry_that_expires():
    from portal.celery import app

    app.finalize()
    entry = app.conf.beat_schedule["node-health-sweep"]
    assert entry["task"] == "scheduling.tasks.sweep_nodes"
    assert entry["options"]["expires"] == entry["schedule"] == settings.NODE_SWEEP_SECONDS
