"""Draining a node: it gets no new work, and its sessions end on their own or, once the
drain's deadline passes, go back to the queue with their age kept (as a silent node's do).

A drain is a node field set (``draining_since``, ``drain_reason``, ``drain_deadline``); the
snapshot leaves a draining node out of placement as it does a cordoned one. The node sweep
(``health.do_sweep_silent_nodes``) calls :func:`do_requeue_overdue_drains` on every run.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from ..choices import NODE_BOUND_STATES, AuditKind, SessionState
from ..engine.reasons import Code, Reason
from ..locks import lock_node
from ..models import Node, Session
from . import Conflict, ServiceError
from .audit import record
from .kick import schedule_soon
from .lifecycle import do_transition

log = logging.getLogger(__name__)

S = SessionState

# What a passed deadline moves back to the queue; stopping and preempting ones end anyway.
REQUEUED_AT_DEADLINE = frozenset({S.PLACED, S.STARTING, S.RUNNING})
REASON_MAX = 500
DEADLINE_MAX_MINUTES = 7 * 24 * 60


def check_node_reason(reason: str) -> str:
    """Every cordon, uncordon and drain says why: the reason, trimmed."""
    reason = (reason or "").strip()
    if not reason:
        raise ServiceError(
            _("Say why, in a few words: the reason is kept in the audit trail."), field="reason"
        )
    if len(reason) > REASON_MAX:
        raise ServiceError(
            _("Keep the reason under %(max)s characters.") % {"max": REASON_MAX}, field="reason"
        )
    return reason


def check_drain(
    node: Node, reason: str, deadline_minutes: int | None, now: datetime | None = None
) -> tuple[str, datetime | None]:
    """The reason and the deadline (None: wait for the sessions to end) of a new drain."""
    reason = check_node_reason(reason)
    if node.draining_since is not None:
        raise ServiceError(
            _("%(node)s is already draining. Stop the drain first to change it.")
            % {"node": node.hostname},
            field="reason",
        )
    if deadline_minutes is None:
        return reason, None
    if not 0 <= deadline_minutes <= DEADLINE_MAX_MINUTES:
        raise ServiceError(
            _("Enter a deadline between 0 and %(max)s minutes, or choose to wait.")
            % {"max": DEADLINE_MAX_MINUTES},
            field="deadline_minutes",
        )
    return reason, (now or timezone.now()) + timedelta(minutes=deadline_minutes)


def _drain_fields(node: Node) -> dict[str, str | None]:
    return {
        "draining_since": node.draining_since.isoformat() if node.draining_since else None,
        "drain_reason": node.drain_reason,
        "drain_deadline": node.drain_deadline.isoformat() if node.drain_deadline else None,
    }


def do_drain(node: Node, actor: str, reason: str, deadline: datetime | None) -> bool:
    """Start draining the node; False if it was draining already."""
    now = timezone.now()
    with transaction.atomic():
        started = (
            Node.objects.filter(pk=node.pk, draining_since=None).update(
                draining_since=now, drain_reason=reason, drain_deadline=deadline, drained_at=None
            )
            == 1
        )
        if started:
            before = _drain_fields(node)
            node.refresh_from_db()
            record(
                AuditKind.NODE_CORDONED,  # a drain takes the node out of placement, as a cordon
                actor,
                node=node,
                data={
                    "action": "drain",
                    "by_hand": True,
                    "reason": reason,
                    "before": before,
                    "after": _drain_fields(node),
                },
            )
    if started:
        log.info("node %s draining (deadline %s): %s", node.hostname, deadline, reason)
    return started


def do_end_drain(node: Node, actor: str, reason: str) -> bool:
    """Stop a drain: the node takes new work again (unless cordoned); False if not draining."""
    with transaction.atomic():
        before = _drain_fields(node)
        ended = (
            Node.objects.filter(pk=node.pk, draining_since__isnull=False).update(
                draining_since=None, drain_reason="", drain_deadline=None, drained_at=None
            )
            == 1
        )
        if ended:
            record(
                AuditKind.NODE_CORDON_CLEARED,
                actor,
                node=node,
                data={
                    "action": "drain_ended",
                    "reason": reason,
                    "before": before,
                    "after": {"draining_since": None, "drain_reason": "", "drain_deadline": None},
                },
            )
            schedule_soon()
    return ended


def sessions_on(node: Node | int) -> int:
    """Sessions still bound to the node (placed, starting, running, stopping, preempting)."""
    return Session.objects.filter(node=node, state__in=NODE_BOUND_STATES).count()


def do_requeue_overdue_drains(now: datetime | None = None) -> int:
    """Requeue the sessions of every drain past its deadline, and mark drains complete once
    their node is empty; the number of sessions requeued."""
    now = now or timezone.now()
    requeued = 0
    overdue = Node.objects.filter(draining_since__isnull=False, drain_deadline__lte=now)
    for node_id in overdue.values_list("pk", flat=True):
        requeued += _requeue_node(node_id, now)
    for node in Node.objects.filter(draining_since__isnull=False, drained_at=None):
        if not sessions_on(node):
            _mark_drained(node, now)
    return requeued


def _requeue_node(node_id: int, now: datetime) -> int:
    with transaction.atomic():
        node = lock_node(node_id)
        if node is None or node.draining_since is None or node.drain_deadline is None:
            return 0
        if node.drain_deadline > now:
            return 0
        reason = Reason(
            Code.NODE_DRAINED_REQUEUED, {"node": node.hostname, "deadline": node.drain_deadline}
        )
        moved: list[int] = []
        sessions = Session.objects.filter(node=node, state__in=REQUEUED_AT_DEADLINE)
        for session_id, state in sessions.order_by("pk").values_list("pk", "state"):
            try:
                do_transition(
                    session_id,
                    S.QUEUED,
                    actor="drain",
                    reason=reason,
                    only_from=frozenset({SessionState(state)}),
                )
            except Conflict:
                continue  # a report moved it meanwhile
            moved.append(session_id)
        if moved:
            record(
                AuditKind.NODE_CORDONED,  # no kind of its own yet: the drain's, with its action
                "drain",
                node=node,
                data={
                    "action": "drain_requeued",
                    "reason": node.drain_reason,
                    "deadline": node.drain_deadline.isoformat(),
                    "requeued": len(moved),
                    "sessions": moved,
                },
            )
    if moved:
        log.warning("node %s drain deadline passed: %d session(s) requeued", node, len(moved))
    return len(moved)


def _mark_drained(node: Node, now: datetime) -> None:
    with transaction.atomic():
        if Node.objects.filter(pk=node.pk, drained_at=None).update(drained_at=now) == 1:
            record(
                AuditKind.NODE_CORDONED,
                "drain",
                node=node,
                data={
                    "action": "drain_complete",
                    "reason": node.drain_reason,
                    "before": {"drained_at": None},
                    "after": {"drained_at": now.isoformat()},
                },
            )


__all__ = [
    "check_drain",
    "check_node_reason",
    "do_drain",
    "do_end_drain",
    "do_requeue_overdue_drains",
    "sessions_on",
]
