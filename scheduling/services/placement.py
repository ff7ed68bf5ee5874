"""Applying the engine's plan: placements, the queue's positions and reasons, preemptions.
(The pool's alert is the "Pool usage" alert rule's, evaluated by ``services.alerts``; the
plan's ``alert`` is not stored.) Each change is its own transaction; one that lost a race is
skipped and the next cycle sees the pool as it is."""

from __future__ import annotations

import logging
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from .. import engine
from ..choices import WAITING_STATES, AuditKind, SessionState
from ..engine.reasons import Code, Reason
from ..events import broadcast_session
from ..models import Allocation, Session
from ..presenters import stored
from . import Conflict, billed
from .audit import record, record_many
from .lifecycle import Move, do_transition, do_transition_many

log = logging.getLogger(__name__)

VNC_PASSWORD_ALPHABET = "abcdefghijkmnopqrstuvwxyzACDEFGHJKLMNPQRSTUVWXYZ23456789"


def new_vnc_password() -> str:
    return "".join(secrets.choice(VNC_PASSWORD_ALPHABET) for _ in range(8))


def place_session(
    session_id: int,
    node_id: int,
    *,
    units: float,
    reason: Reason,
    warm_key: str = "",
    audit: Mapping[str, Any],
) -> None:
    """A waiting session becomes PLACED on ``node_id``: new VNC password, the audit record.
    The caller gives it its holds in the same transaction; Conflict when something raced."""
    do_transition(
        session_id,
        SessionState.PLACED,
        actor="scheduler",
        only_from=frozenset(WAITING_STATES),
        reason=reason,
        **_placed_fields(node_id, units, warm_key),
    )
    record(
        AuditKind.SESSION_PLACED, "scheduler", session=session_id, node=node_id, data=dict(audit)
    )


@dataclass(frozen=True)
class Placed:
    """One session of :func:`place_sessions`: what :func:`place_session` is given for it."""

    session_id: int
    node_id: int
    units: float
    reason: Reason
    audit: Mapping[str, Any]
    warm_key: str = ""


def place_sessions(placed: Sequence[Placed]) -> None:
    """Several waiting sessions become PLACED together, each as :func:`place_session` would
    place it (the same changes, transition and placement audit events, broadcasts and agent
    wakes), in a fixed number of queries (``lifecycle.do_transition_many``, ``record_many``).
    All or none: Conflict when any of them is no longer waiting; the caller gives them their
    holds in the same transaction and, on a Conflict, places them one by one."""
    moves = [
        Move(p.session_id, _placed_fields(p.node_id, p.units, p.warm_key), p.reason) for p in placed
    ]
    do_transition_many(
        moves, SessionState.PLACED, actor="scheduler", only_from=frozenset(WAITING_STATES)
    )
    audits = [(p.session_id, p.node_id, p.audit) for p in placed]
    record_many(AuditKind.SESSION_PLACED, "scheduler", audits)


def _placed_fields(node_id: int, units: float, warm_key: str = "") -> dict[str, Any]:
    """What a placement writes on its session besides the state and the reason."""
    return {
        "node_id": node_id,
        "placed_at": timezone.now(),
        "queue_position": None,
        "vnc_password": new_vnc_password(),
        "eta": None,
        "blocked": False,
        "compute_units": units,
        "warm_key": warm_key,
    }


def _parts(placement: engine.Placement) -> list[tuple[int, Sequence[int]]]:
    """(node, slices) of each node the placement holds: its own first."""
    return [(placement.node_id, placement.slice_ids), *placement.others]


class Units:
    """The compute units of a batch's sessions: of their slices, each capped at the slice the
    session's profile asked for (``services.billed``: never billed for more)."""

    def __init__(self, snapshot: engine.Snapshot) -> None:
        self.slices = {s.slice_id: s for s in snapshot.free_slices}
        self.requests = {r.session_id: r for r in snapshot.queue}
        self.asked = billed.Asked()

    def of(self, placement: engine.Placement) -> float:
        held = [self.slices[i] for _, ids in _parts(placement) for i in ids if i in self.slices]
        parts = [(s.gpu_model, billed.Part(s.kind, "", s.milli, s.compute_units)) for s in held]
        r = self.requests.get(placement.session_id)
        if r is None:
            return billed.units([p for _, p in parts])
        ask = billed.Ask(r.allowed_kinds, r.gpu_memory_min_mb, r.compute_min)
        return billed.units(self.asked.billed(parts, ask))


def _holds(placement: engine.Placement) -> list[Allocation]:
    """A hold per slice, on its node; one without a slice for a CPU-only desktop."""
    holds = [
        Allocation(session_id=placement.session_id, node_id=node, slice_id=sid)
        for node, ids in _parts(placement)
        for sid in ids
    ]
    return holds or [Allocation(session_id=placement.session_id, node_id=placement.node_id)]


def _placed_audit(placement: engine.Placement) -> dict[str, Any]:
    """Its slices and nodes; for a request with a home kept on a node, whether it went
    there (``home``: ``kept``) or not (``away``, with the ``home_node`` it could not use)."""
    parts = _parts(placement)
    audit: dict[str, Any] = {
        "slices": [sid for _, ids in parts for sid in ids],
        "nodes": [n for n, _ in parts],
    }
    if placement.reason is not None and placement.reason.code == Code.PLACED_HOME:
        audit["home"] = "kept"
    elif placement.reason is not None and placement.reason.code == Code.PLACED_AWAY:
        audit.update(home="away", home_node=placement.reason.params.get("home"))
    return audit


def _placed_reason(placement: engine.Placement) -> Reason:
    """The engine's word on the home (PLACED_HOME, PLACED_AWAY), else PLACED."""
    return placement.reason or Reason(Code.PLACED)


def apply_placements(placements: Sequence[engine.Placement], snapshot: engine.Snapshot) -> int:
    """A cycle's placements, together (:func:`place_sessions`, the holds in one INSERT: a
    fixed number of queries), in a savepoint; when one of them raced (a session
    no longer waiting, a slice taken), that savepoint rolls back and each is applied on its
    own, the racing ones skipped. Returns how many were placed."""
    if not placements:
        return 0
    units = Units(snapshot)
    placed = [
        Placed(p.session_id, p.node_id, units.of(p), _placed_reason(p), _placed_audit(p))
        for p in placements
    ]
    try:
        with transaction.atomic():
            place_sessions(placed)
            Allocation.objects.bulk_create([h for p in placements for h in _holds(p)])
        return len(placements)
    except (IntegrityError, Conflict) as error:
        log.info("placing %d together lost a race (%s): one by one", len(placements), error)
    return sum(1 for p in placements if apply_placement(p, snapshot, units))


def apply_placement(
    placement: engine.Placement, snapshot: engine.Snapshot, units: Units | None = None
) -> bool:
    """Claim the session and its slices in one transaction; False if anything raced us."""
    try:
        with transaction.atomic():
            place_session(
                placement.session_id,
                placement.node_id,
                units=(units or Units(snapshot)).of(placement),
                reason=_placed_reason(placement),
                audit=_placed_audit(placement),
            )
            for hold in _holds(placement):
                hold.save()
        return True
    except (IntegrityError, Conflict) as error:
        log.info("placement of session %s lost a race: %s", placement.session_id, error)
        return False


def _queue_reason(entry: engine.QueueEntry) -> Reason:
    if entry.eta is None or entry.blocked:
        return entry.reason
    return entry.reason.with_params(eta=entry.eta)


def _minute(moment: datetime | None) -> datetime | None:
    return None if moment is None else moment.replace(second=0, microsecond=0)


def apply_queue(entries: list[engine.QueueEntry]) -> None:
    """Store every waiting session's position, reason and estimated start; push the changes."""
    rows = Session.objects.filter(pk__in=[e.session_id for e in entries])
    current = {
        s.pk: (s.queue_position, s.reason_code, _stable(s.reason_params), s.blocked, _minute(s.eta))
        for s in rows
    }
    decided = {s.pk: (s.reason_code, _decision(s.reason_params), s.blocked) for s in rows}
    for entry in entries:
        position = entry.position or None
        fields = stored(_queue_reason(entry))
        seen = (
            position,
            fields["reason_code"],
            _stable(fields["reason_params"]),
            entry.blocked,
            _minute(entry.eta),
        )
        # The ETA moves a little every cycle: only a change a person would see is pushed.
        before = current.get(entry.session_id)
        if before == seen:
            continue
        with transaction.atomic():
            changed = Session.objects.filter(pk=entry.session_id, state__in=WAITING_STATES).update(
                queue_position=position, eta=entry.eta, blocked=entry.blocked, **fields
            )
            if changed:
                # The decision is audited when its reason or blocked flag changes, not when
                # only the position, the counts ahead or the ETA move: an unchanged reason
                # is written once, however long the queue.
                params = _decision(fields["reason_params"])
                decision = (fields["reason_code"], params, entry.blocked)
                if decided.get(entry.session_id) != decision:
                    record(
                        AuditKind.SESSION_BLOCKED,
                        "scheduler",
                        session=entry.session_id,
                        data={"blocked": entry.blocked, "position": position, **fields},
                    )
                broadcast_session(entry.session_id)


def _stable(params: Mapping[str, Any]) -> tuple:
    """Parameters compared without the ETA (its minute is compared on its own)."""
    return tuple(sorted((k, repr(v)) for k, v in params.items() if k != "eta"))


# What moves while a request waits for the same reason: not a new decision to audit.
MOVING_PARAMS = frozenset({"eta", "ahead", "higher"})


def _decision(params: Mapping[str, Any]) -> tuple:
    """The parameters that make a decision: without the ETA and the counts ahead."""
    return tuple(sorted((k, repr(v)) for k, v in params.items() if k not in MOVING_PARAMS))


def apply_preemption(p: engine.Preemption) -> bool:
    try:
        with transaction.atomic():
            do_transition(
                p.victim_id,
                SessionState.PREEMPTING,
                actor="scheduler",
                reason=p.reason,
                only_from=frozenset({SessionState.RUNNING}),
                preempt_deadline=p.deadline,
                preempted_for_id=p.for_session_id,
            )
            record(
                AuditKind.SESSION_PREEMPTED,
                "scheduler",
                session=p.victim_id,
                data={"for": p.for_session_id, "deadline": p.deadline.isoformat()},
            )
        return True
    except Conflict as error:
        log.info("preemption of session %s skipped: %s", p.victim_id, error)
        return False
