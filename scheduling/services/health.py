"""Node health: requeue the sessions of a silent node, cordon a node that keeps failing.

A node whose heartbeat is older than ``NODE_HEARTBEAT_TIMEOUT_S`` is unhealthy and gets
nothing new (``Node.is_healthy``). After ``NODE_LOST_AFTER_S`` of silence the sweep moves
its sessions off it: the ones it was starting or running go back to the queue with their
age kept, the ones the user was stopping end. ``CORDON_AFTER_FAILURES`` (3) desktops failing
to start on one node within ten minutes cordon it until an admin clears it (the rule:
``rules.gpu_health.node_should_cordon``; failures before the last uncordon do not count).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from ..choices import NODE_BOUND_STATES, AuditKind, SessionState
from ..engine.reasons import Code, Reason
from ..locks import lock_node
from ..models import AuditEvent, Node, Session
from ..rules.gpu_health import NODE_FAILURE_WINDOW, START_FAILURES, node_should_cordon
from . import Conflict
from .audit import record
from .drain import do_requeue_overdue_drains
from .kick import schedule_soon
from .lifecycle import do_transition

log = logging.getLogger(__name__)

S = SessionState

# Where each state goes when its node stops answering.
ON_SILENCE: dict[SessionState, SessionState] = {
    S.PLACED: S.QUEUED,
    S.STARTING: S.QUEUED,
    S.RUNNING: S.QUEUED,
    S.PREEMPTING: S.PREEMPTED,
    S.STOPPING: S.ENDED,
}


@dataclass(frozen=True)
class SweepResult:
    nodes: tuple[str, ...]  # hostnames of the silent nodes whose sessions were moved
    requeued: int
    ended: int


def _reason(node: Node, target: SessionState) -> Reason:
    code = Code.NODE_SILENT_ENDED if target == S.ENDED else Code.NODE_SILENT_REQUEUED
    return Reason(code, {"node": node.hostname, "since": node.last_heartbeat})


def do_sweep_silent_nodes(now: datetime | None = None) -> SweepResult:
    """Move the sessions off every node silent for longer than ``NODE_LOST_AFTER_S``."""
    now = now or timezone.now()
    cutoff = now - timedelta(seconds=settings.NODE_LOST_AFTER_S)
    silent = Node.objects.filter(
        last_heartbeat__lt=cutoff, session__state__in=NODE_BOUND_STATES
    ).distinct()
    hostnames: list[str] = []
    requeued = ended = 0
    for node_id in silent.values_list("pk", flat=True):
        moved = _sweep_node(node_id, cutoff)
        if moved is None:
            continue
        hostname, node_requeued, node_ended = moved
        hostnames.append(hostname)
        requeued += node_requeued
        ended += node_ended
    # Drains past their deadline move their sessions here too (services/drain.py).
    do_requeue_overdue_drains(now)
    return SweepResult(nodes=tuple(hostnames), requeued=requeued, ended=ended)


def _sweep_node(node_id: int, cutoff: datetime) -> tuple[str, int, int] | None:
    """One node in one transaction; None if it answered again or has nothing to move."""
    with transaction.atomic():
        # The row lock makes a heartbeat arriving now wait until the sessions have moved.
        node = lock_node(node_id)
        if node is None or node.last_heartbeat is None or node.last_heartbeat >= cutoff:
            return None
        requeued = ended = 0
        sessions = Session.objects.filter(node=node, state__in=NODE_BOUND_STATES).order_by("pk")
        for session_id, state in sessions.values_list("pk", "state"):
            target = ON_SILENCE[SessionState(state)]
            try:
                do_transition(
                    session_id,
                    target,
                    actor="health",
                    reason=_reason(node, target),
                    only_from=frozenset({SessionState(state)}),
                )
            except Conflict:
                continue  # a report moved it meanwhile; nothing left to do for it
            if target == S.ENDED:
                ended += 1
            else:
                requeued += 1
        if not requeued and not ended:
            return None
        record(
            AuditKind.NODE_SILENT,
            "health",
            node=node,
            data={
                "last_heartbeat": node.last_heartbeat.isoformat(),
                "requeued": requeued,
                "ended": ended,
            },
        )
    log.warning(
        "node %s silent since %s: %d session(s) requeued, %d ended",
        node.hostname,
        node.last_heartbeat,
        requeued,
        ended,
    )
    return node.hostname, requeued, ended


def _failed_starts(node: Node, now: datetime) -> tuple[list[datetime], datetime | None]:
    """When desktops failed to start on the node lately (their FAILED transitions), and
    when an admin last cleared its cordon."""
    failed = AuditEvent.objects.filter(
        kind=AuditKind.SESSION_TRANSITION,
        node=node,
        data__to=SessionState.FAILED,
        at__gt=now - NODE_FAILURE_WINDOW,
        at__lte=now,
    )
    cleared = AuditEvent.objects.filter(kind=AuditKind.NODE_CORDON_CLEARED, node=node)
    return list(failed.values_list("at", flat=True)), cleared.order_by("-at").values_list(
        "at", flat=True
    ).first()


def do_record_session_failed(node: Node, now: datetime | None = None) -> bool:
    """One more desktop failed to start on this node (its FAILED transition is audited);
    True if that cordoned it: ``CORDON_AFTER_FAILURES`` within ten minutes."""
    now = now or timezone.now()
    with transaction.atomic():
        Node.objects.filter(pk=node.pk).update(failures_in_a_row=F("failures_in_a_row") + 1)
        failures, cleared_at = _failed_starts(node, now)
        due = node_should_cordon(failures, now, cleared_at, count=settings.CORDON_AFTER_FAILURES)
        # Only the writer that flips the flag audits it, however many failures race.
        cordoned = (
            due
            and Node.objects.filter(pk=node.pk, cordoned=False).update(
                cordoned=True, cordon_reason=START_FAILURES
            )
            == 1
        )
        if cordoned:
            window_s = int(NODE_FAILURE_WINDOW.total_seconds())
            record(
                AuditKind.NODE_CORDONED,
                "health",
                node=node,
                data={"failures": len(failures), "window_s": window_s, "cause": START_FAILURES},
            )
    if cordoned:
        log.warning("node %s cordoned after repeated session failures", node.hostname)
    return cordoned


def do_record_session_running(node: Node) -> None:
    """A desktop reached RUNNING here: the node's run of failures is over (shown on the
    admin's node page; the cordon rule counts failures in a window, not in a row)."""
    Node.objects.filter(pk=node.pk, failures_in_a_row__gt=0).update(failures_in_a_row=0)


def do_cordon(node: Node, actor: str, reason: str) -> bool:
    """An admin takes the node out of placement by hand, saying why (``drain.check_node_reason``);
    False if it was cordoned already."""
    with transaction.atomic():
        cordoned = (
            Node.objects.filter(pk=node.pk, cordoned=False).update(
                cordoned=True, cordon_reason=reason
            )
            == 1
        )
        if cordoned:
            record(
                AuditKind.NODE_CORDONED,
                actor,
                node=node,
                data={
                    "by_hand": True,
                    "reason": reason,
                    "before": {"cordoned": False, "cordon_reason": node.cordon_reason},
                    "after": {"cordoned": True, "cordon_reason": reason},
                },
            )
    return cordoned


def do_clear_cordon(node: Node, actor: str, reason: str = "") -> bool:
    """An admin puts the node back in service, saying why; False if it was not cordoned."""
    with transaction.atomic():
        cleared = (
            Node.objects.filter(pk=node.pk, cordoned=True).update(
                cordoned=False, failures_in_a_row=0, cordon_reason=""
            )
            == 1
        )
        if cleared:
            data = {
                "before": {"cordoned": True, "cordon_reason": node.cordon_reason},
                "after": {"cordoned": False, "cordon_reason": ""},
            }
            record(AuditKind.NODE_CORDON_CLEARED, actor, node=node, data={"reason": reason, **data})
            schedule_soon()
    return cleared


__all__ = [
    "SweepResult",
    "do_clear_cordon",
    "do_cordon",
    "do_record_session_failed",
    "do_record_session_running",
    "do_sweep_silent_nodes",
]
