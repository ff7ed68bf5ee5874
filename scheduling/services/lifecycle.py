"""The one module that moves sessions between lifecycle states.

Every transition is a single conditional UPDATE (so two racing writers cannot both win),
is audited, releases allocations on entering a terminal state or on going back to the queue
(a requeued session keeps its ``created_at``, so its age, and forgets its node and desktop),
and is broadcast to the session's owner after the transaction commits.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import Case, Field, Value, When
from django.utils import timezone
from django.utils.translation import gettext as _

from ..choices import ON_NODE_STATES, TERMINAL_STATES, WAITING_STATES, AuditKind, SessionState
from ..engine.reasons import Reason
from ..events import broadcast_session
from ..locks import lock_sessions
from ..models import Allocation, Session
from ..presenters import stored
from . import Conflict, lifecycle_notices, usage_runs
from .agent_wake import wake_nodes
from .audit import record, record_many
from .kick import schedule_soon

S = SessionState

ALLOWED: dict[SessionState, frozenset[SessionState]] = {
    S.QUEUED: frozenset({S.PLACED, S.CANCELLED}),
    S.PLACED: frozenset({S.STARTING, S.RUNNING, S.ENDED, S.FAILED, S.LOST, S.QUEUED}),
    # ... -> QUEUED: the node went silent; the session waits again with its age kept.
    S.STARTING: frozenset({S.RUNNING, S.STOPPING, S.FAILED, S.LOST, S.ENDED, S.QUEUED}),
    S.RUNNING: frozenset(
        {S.STOPPING, S.ENDED, S.FAILED, S.LOST, S.EXPIRED, S.PREEMPTING, S.QUEUED, S.SUSPENDED}
    ),
    S.STOPPING: frozenset({S.ENDED, S.FAILED, S.LOST}),
    S.PREEMPTING: frozenset({S.PREEMPTED, S.ENDED, S.FAILED, S.LOST}),
    S.PREEMPTED: frozenset({S.PLACED, S.CANCELLED}),
    # Idle (services.idle): back to the queue with its age kept (resume), or ended.
    S.SUSPENDED: frozenset({S.QUEUED, S.ENDED}),
}

REQUEUE_CLEARS: dict[str, Any] = {
    "node": None,
    "queue_position": None,
    "placed_at": None,
    "started_at": None,
    "desktop_host": "",
    "desktop_port": None,
    "desktop_audio_port": None,
    "container_id": "",
    "vnc_password": "",
    "preempt_deadline": None,
    "preempted_for": None,
    "compute_units": 0.0,
}
# Leaving the node without ending: the holds are released and the node forgotten (the
# desktop is no longer desired there, so its agent stops it; the home volume is kept).
OFF_NODE_STATES = WAITING_STATES | {S.SUSPENDED}


def sources_of(target: SessionState) -> list[SessionState]:
    """The states from which a session may move to ``target``."""
    return [source for source, targets in ALLOWED.items() if target in targets]


def _changes(
    target: SessionState, reason: Reason | None, fields: Mapping[str, Any], now: datetime
) -> tuple[dict[str, Any], dict[str, Any]]:
    """What a transition to ``target`` writes on the session, and the reason's part of it
    (which the audit event repeats)."""
    changes: dict[str, Any] = {"state": target, **fields}
    if target in TERMINAL_STATES:
        changes.setdefault("ended_at", now)
        changes.setdefault("queue_position", None)
    if target in OFF_NODE_STATES:
        # Back in the queue (or suspended): the next placement picks a node, a slice and a
        # password anew.
        for name, empty in REQUEUE_CLEARS.items():
            changes.setdefault(name, empty)
    if reason is not None:
        fields_of_reason = stored(reason)
    elif target in TERMINAL_STATES or target == S.RUNNING:
        fields_of_reason = {"reason_code": "", "reason_params": {}}
    else:
        fields_of_reason = {}
    changes.update(fields_of_reason)
    return changes, fields_of_reason


def do_transition(
    session_id: int,
    target: SessionState,
    *,
    actor: str,
    reason: Reason | None = None,
    only_from: frozenset[SessionState] | None = None,
    audit_data: Mapping[str, Any] | None = None,
    **fields: Any,
) -> Session:
    """Move one session to ``target`` if its current state allows it; raise Conflict if not.

    ``audit_data``: more for the transition's audit event only (the admins' view), such as
    the runtime's own words about a failed start."""
    sources = set(sources_of(target))
    if only_from is not None:
        sources &= set(only_from)
    now = timezone.now()
    changes, fields_of_reason = _changes(target, reason, fields, now)
    with transaction.atomic():
        row = Session.objects.filter(pk=session_id).values_list("state", "node_id").first()
        if row is None:
            raise Conflict(_("Session %(id)s does not exist.") % {"id": session_id})
        current, node_id = row
        updated = Session.objects.filter(pk=session_id, state__in=sources).update(**changes)
        if updated != 1:
            raise Conflict(
                _("Session %(id)s is %(state)s; it cannot become %(target)s.")
                % {"id": session_id, "state": current, "target": target}
            )
        # A run's usage record opens at RUNNING and closes when the run ends, while its
        # holds are still live (they tell the slices and the GPUs' utilisation).
        run_ends_at = changes.get("ended_at") or now
        usage_runs.on_transition(session_id, target, run_ends_at, changes.get("started_at"))
        if target in TERMINAL_STATES or target in OFF_NODE_STATES:
            released = Allocation.objects.filter(session_id=session_id, released_at=None).update(
                released_at=now
            )
        else:
            released = 0
        record(
            AuditKind.SESSION_TRANSITION,
            actor,
            session=session_id,
            node=node_id,  # the node it was on, also when a requeue clears it
            data={
                "from": current,
                "to": target,
                "released": released,
                **fields_of_reason,
                **(audit_data or {}),
            },
        )
        _after_commit(session_id, capacity_released=released > 0 or target in WAITING_STATES)
        lifecycle_notices.on_entering(target, [session_id], now)
        if changes_desired(current, target, node_id, changes.get("node_id", node_id)):
            # The node it was on, and the node it is placed on: what they should run changed.
            wake_nodes([node_id, changes.get("node_id")])
    return Session.objects.select_related("profile", "node", "user").get(pk=session_id)


@dataclass(frozen=True)
class Move:
    """One session of :func:`do_transition_many`: its own changes (every move of a call
    names the same fields) and reason."""

    session_id: int
    fields: Mapping[str, Any]
    reason: Reason | None = None


# Targets that release nothing and leave no node (so :func:`do_transition_many` needs no
# per-session release or requeue).
MANY_TARGETS = frozenset({S.PLACED, S.STARTING, S.RUNNING})


def do_transition_many(
    moves: Sequence[Move],
    target: SessionState,
    *,
    actor: str,
    only_from: frozenset[SessionState] | None = None,
    on_node: int | None = None,
    locked: Mapping[int, tuple[str, int | None]] | None = None,
) -> None:
    """Move several sessions to ``target`` as :func:`do_transition` moves each (the same
    changes, usage records, audit events, broadcasts and wakes), in a fixed number of
    queries instead of a dozen each: a cycle placing fifty, an agent reporting fifty
    desktops RUNNING. ``on_node``: only sessions on that node. ``locked``: the sessions'
    states and nodes as the caller locked them earlier in its transaction
    (``locks.lock_sessions``), not read again.

    The rows are locked first, in id order (``locks.lock_sessions``): two writers of many
    rows never wait on each other in opposite orders. All or none: Conflict when any of
    them is not in a state it can move from (or not on ``on_node``); the caller then
    applies them one by one, each with its own answer."""
    if target not in MANY_TARGETS:
        raise ValueError(f"{target} releases holds or leaves a node: use do_transition")
    if not moves:
        return
    sources = set(sources_of(target)) & set(only_from or ALLOWED)
    now = timezone.now()
    with transaction.atomic():
        if locked is None:
            locked = lock_sessions(m.session_id for m in moves)
        changed: dict[int, dict[str, Any]] = {}
        audited: list[tuple[int | None, int | None, Mapping[str, Any]]] = []
        woken: set[int | None] = set()
        for move in moves:
            current, node_id = locked.get(move.session_id, ("", None))
            if current not in sources or (on_node is not None and node_id != on_node):
                raise Conflict(
                    _("Some of these sessions changed meanwhile; apply them one by one.")
                )
            changes, fields_of_reason = _changes(target, move.reason, move.fields, now)
            changed[move.session_id] = changes
            new_node = changes.get("node_id", node_id)
            data = {"from": current, "to": target, "released": 0, **fields_of_reason}
            audited.append((move.session_id, new_node, data))
            if changes_desired(current, target, node_id, new_node):
                woken |= {node_id, new_node}
        names = set().union(*(c.keys() for c in changed.values())) - {"state"}
        Session.objects.filter(pk__in=list(changed)).update(
            state=target, **{name: _each(changed, name) for name in names}
        )
        if target == S.RUNNING:
            usage_runs.open_runs({pk: c.get("started_at") or now for pk, c in changed.items()})
        record_many(AuditKind.SESSION_TRANSITION, actor, audited)
        for session_id in changed:
            _after_commit(session_id, capacity_released=False)
        lifecycle_notices.on_entering(target, changed, now)
        wake_nodes(woken)


def _each(changed: Mapping[int, Mapping[str, Any]], name: str) -> Any:
    """The value of field ``name`` for each session: itself when all are alike, else a
    CASE on the id."""
    values = {pk: changes.get(name) for pk, changes in changed.items()}
    distinct = {repr(v) for v in values.values()}
    if len(distinct) == 1:
        return next(iter(values.values()))
    field = Session._meta.get_field(name)
    assert isinstance(field, Field)  # a column of the session, not a relation's reverse
    cases = [When(pk=pk, then=Value(v, output_field=field)) for pk, v in values.items()]
    return Case(*cases, output_field=field)


def changes_desired(
    current: str, target: str, node_id: int | None, new_node_id: int | None
) -> bool:
    """Whether a transition changes what a node's agent is told to run
    (``agent_sessions.desired_state``: the node's sessions in an on-node state). Moving
    between on-node states on the same node (PLACED → STARTING → RUNNING, RUNNING →
    PREEMPTING) does not: waking the agent for it, once per desktop its reports started,
    would only make it fetch the same desired state again."""
    stays = current in ON_NODE_STATES and target in ON_NODE_STATES
    return not (stays and new_node_id == node_id)


def _after_commit(session_id: int, *, capacity_released: bool) -> None:
    broadcast_session(session_id)
    if capacity_released:
        schedule_soon()
