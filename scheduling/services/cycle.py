"""One scheduling cycle: read a snapshot, ask the engine for a plan, apply it.

The pieces: :mod:`.timers` (grace periods, time limits), :mod:`.snapshot` (the pool as the
engine sees it), :mod:`.warm` (warm desktops claimed, dropped and started on the plan's
booking holds) and :mod:`.placement` (placements, queue, preemptions).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from .. import engine
from ..locks import lock_sessions
from . import warm
from .eligibility import demote_ineligible
from .placement import apply_placements, apply_preemption, apply_queue
from .snapshot import build_snapshot
from .timers import finish_grace_periods, stop_overdue

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CycleResult:
    placed: int
    waiting: int
    conflicts: int


def touched(result: engine.Plan) -> set[int]:
    """The sessions a plan changes: those it places, preempts or queues."""
    return (
        {p.session_id for p in result.placements}
        | {p.victim_id for p in result.preemptions}
        | {e.session_id for e in result.queue}
    )


def do_scheduling_cycle(now: datetime | None = None) -> CycleResult:
    """Run one cycle. Callers hold the single-flight lock (see ``scheduling.tasks``)."""
    now = now or timezone.now()
    finish_grace_periods(now)
    stop_overdue(now)
    warm.prune_warm(now)
    demote_ineligible(now)  # thesis without a grant, coursework without enrolment: hobby
    snapshot = build_snapshot(now)
    # Booked students first take their class's READY warm desktops; the engine plans the rest.
    claimed = warm.claim_warm(snapshot, now)
    if claimed:
        snapshot = replace(
            snapshot, queue=tuple(r for r in snapshot.queue if r.session_id not in claimed)
        )
    result = engine.plan(snapshot, now)
    # One commit for the whole plan: the placements in one savepoint (each in its own when
    # one raced, which then rolls back alone), and the students' pages and the agents hear
    # of all of them at once.
    with transaction.atomic():
        # Every session this commit may write, locked first, in one id order (as every
        # writer of several sessions locks them): applied one after another, the placements,
        # preemptions and queue each in their own order, a cycle and another writer of the
        # same sessions could each hold a row the other waits for (PostgreSQL then aborts
        # one: a deadlock seen in the racing-cycles test).
        lock_sessions(touched(result))
        newly = apply_placements(result.placements, snapshot)
        placed, conflicts = len(claimed) + newly, len(result.placements) - newly
        for preemption in result.preemptions:
            apply_preemption(preemption)
        apply_queue(result.queue)
    warm.top_up_warm(snapshot, result, now)
    for note in result.notes:
        log.warning("cycle: %s %s", note.code, dict(note.params))
    if placed or conflicts:
        log.info("cycle: placed %d, waiting %d, conflicts %d", placed, len(result.queue), conflicts)
    return CycleResult(placed=placed, waiting=len(result.queue), conflicts=conflicts)
