"""The one module that moves sessions between lifecycle states.

Every transition is a single conditional UPDATE (so two racing writers cannot both win),
is audited, releases allocations on entering a terminal state, and is broadcast to the
session's owner after the transaction commits.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils import timezone

from ..choices import TERMINAL_STATES, AuditKind, SessionState
from ..models import Allocation, AuditEvent, Session
from . import Conflict

S = SessionState

ALLOWED: dict[SessionState, frozenset[SessionState]] = {
    S.QUEUED: frozenset({S.PLACED, S.CANCELLED}),
    S.PLACED: frozenset({S.STARTING, S.RUNNING, S.ENDED, S.FAILED, S.LOST, S.QUEUED}),
    S.STARTING: frozenset({S.RUNNING, S.STOPPING, S.FAILED, S.LOST, S.ENDED}),
    S.RUNNING: frozenset({S.STOPPING, S.ENDED, S.FAILED, S.LOST, S.EXPIRED, S.PREEMPTING}),
    S.STOPPING: frozenset({S.ENDED, S.FAILED, S.LOST}),
    S.PREEMPTING: frozenset({S.PREEMPTED, S.ENDED, S.FAILED, S.LOST}),
    S.PREEMPTED: frozenset({S.PLACED, S.CANCELLED}),
}


def sources_of(target: SessionState) -> list[SessionState]:
    """The states from which a session may move to ``target``."""
    return [source for source, targets in ALLOWED.items() if target in targets]


def do_transition(
    session_id: int,
    target: SessionState,
    *,
    actor: str,
    reason: str = "",
    only_from: frozenset[SessionState] | None = None,
    **fields: Any,
) -> Session:
    """Move one session to ``target`` if its current state allows it; raise Conflict if not."""
    sources = set(sources_of(target))
    if only_from is not None:
        sources &= set(only_from)
    now = timezone.now()
    changes: dict[str, Any] = {"state": target, **fields}
    if target in TERMINAL_STATES:
        changes.setdefault("ended_at", now)
        changes.setdefault("queue_position", None)
    if reason or target in TERMINAL_STATES or target == S.RUNNING:
        changes.setdefault("reason", reason)
    with transaction.atomic():
        current = Session.objects.filter(pk=session_id).values_list("state", flat=True).first()
        if current is None:
            raise Conflict(f"Session {session_id} does not exist.")
        updated = Session.objects.filter(pk=session_id, state__in=sources).update(**changes)
        if updated != 1:
            raise Conflict(f"Session {session_id} is {current}; it cannot become {target}.")
        if target in TERMINAL_STATES:
            released = Allocation.objects.filter(session_id=session_id, released_at=None).update(
                released_at=now
            )
        else:
            released = 0
        AuditEvent.objects.create(
            kind=AuditKind.SESSION_TRANSITION,
            actor=actor,
            session_id=session_id,
            data={"from": current, "to": target, "reason": reason},
        )
        _after_commit(session_id, capacity_released=released > 0 or target == S.QUEUED)
    return Session.objects.select_related("profile", "node", "user").get(pk=session_id)


def _after_commit(session_id: int, *, capacity_released: bool) -> None:
    from portal.events import broadcast_session

    from ..tasks import schedule_soon

    transaction.on_commit(lambda: broadcast_session(session_id))
    if capacity_released:
        schedule_soon()
