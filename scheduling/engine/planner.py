"""The scheduling engine: ``plan(snapshot, now) -> Plan``. Pure Python, deterministic.

One cycle, in this order (each step's module says how):

1. **Order** (here). Effective tier first: a request for a class booking inside its window is
   tier 0, then thesis (1), coursework (2), hobby (3). Within a tier, fair share plus aging:
   the key is ``usage_gpu_hours * aging_s_per_gpu_hour - waited_s`` (less recent usage and
   longer waits go first), then submission time and id, so the order is total and the plan
   deterministic. A request an admin boosted (``boosted_at``) goes before every unboosted
   request of its tier, earlier boosts first.
2. **Holds** (:mod:`.holds`). Every booking that starts within the hold horizon and has not
   ended holds capacity for its seats not yet running; the held slices leave the general pool.
   A booked request takes its booking's hold first. Anyone else may *backfill* a hold only if
   they end (now + expected duration) before the booking starts.
3. **Placement**, request by request (:mod:`.pool`, :mod:`.placement`). Feasibility: node
   healthy, CPU and RAM headroom, slice kind allowed, GPU memory, GPU model, compute units, GPU
   below the temperature limit, rack power headroom, quotas (:mod:`.quotas`: concurrent
   sessions, GPU-hours this week, largest slice) of the user, the course and the department.
   Among feasible nodes the best score wins (ties: lowest node id), except that a request
   with ``home_nodes`` (its person's home is kept on those nodes only) goes to the first of
   them that fits; the placement then says so (``Code.PLACED_HOME``, or ``PLACED_AWAY`` when
   none could take it). Multi-GPU requests are all-or-nothing: distinct GPUs of one node, or
   (``multi_node``) nodes of one network plane.
4. **Preemption** (:mod:`.preempt`). A booked, thesis or coursework request that still cannot
   start may preempt running sessions of a lower tier; victims get the grace period and the
   request waits for them.
5. **Queue** (:mod:`.explain`). Every request left waiting gets a position (blocked requests
   get none), a reason (a :class:`~scheduling.engine.reasons.Reason`: a code and parameters)
   and an estimated start from the expected ends of running sessions and the queue ahead.

The plan also carries the pool alert (:func:`.quotas.alert_for`), notes (bookings whose seats
do not all fit) and the booking holds still standing at the end (``Plan.holds``).
"""

from __future__ import annotations

import gc
from collections import defaultdict
from dataclasses import replace
from datetime import datetime, timedelta

from .explain import Waiting, explain
from .holds import backfill, hold_bookings, own_hold, standing
from .model import (
    TIER_BOOKED,
    TIER_KEYS,
    Booking,
    FreeSlice,
    Placement,
    Plan,
    Policy,
    Preemption,
    QueuedRequest,
    RunningSession,
    Snapshot,
)
from .placement import at_home, best, multi_node
from .pool import Cycle, Shape
from .preempt import preempt
from .quotas import alert_for, count_session, quota_block, utilisation
from .reasons import Code, Reason


def in_window(booking: Booking, now: datetime) -> bool:
    return booking.starts_at <= now < booking.ends_at


def effective_tier(request_tier: int, booking: Booking | None, now: datetime) -> int:
    """Tier 0 for a booked class inside its window; else the purpose's tier."""
    if booking is not None and in_window(booking, now):
        return TIER_BOOKED
    return request_tier


def order_key(request: QueuedRequest, tier: int, now: datetime, policy: Policy) -> tuple:
    waited = (now - request.submitted_at).total_seconds()
    share = request.usage_gpu_hours * policy.aging_s_per_gpu_hour - waited
    # A boosted request goes before the unboosted ones of its tier; boosts in their order.
    boost = (0, request.boosted_at.timestamp()) if request.boosted_at else (1, 0.0)
    return (tier, boost, share, request.submitted_at, request.session_id)


def plan(snapshot: Snapshot, now: datetime) -> Plan:
    """Order, hold, place, preempt, and explain; see the module docstring.

    The cyclic garbage collector is paused for the call: a cycle allocates many small tuples
    and frees them all at the end, and collections in between cost about 7% of a large cycle
    (``python -m bench.scheduler``) for nothing.
    """
    paused = gc.isenabled()
    gc.disable()
    try:
        return _plan(snapshot, now)
    finally:
        if paused:
            gc.enable()


def _plan(snapshot: Snapshot, now: datetime) -> Plan:
    cycle = Cycle(snapshot, now)
    policy = cycle.policy
    result = Plan()
    hold_bookings(cycle, result)

    tiers = {
        r.session_id: effective_tier(r.tier, cycle.bookings.get(r.booking_id or -1), now)
        for r in snapshot.queue
    }
    victim_tiers = {
        v.session_id: effective_tier(v.tier, cycle.bookings.get(v.booking_id or -1), now)
        for v in snapshot.running
    }
    ordered = sorted(snapshot.queue, key=lambda r: order_key(r, tiers[r.session_id], now, policy))
    pending_victims: dict[int, list[RunningSession]] = defaultdict(list)
    for running in snapshot.running:
        if running.preempted_for is not None:
            pending_victims[running.preempted_for].append(running)
    victims_taken: set[int] = set()
    waiting: list[Waiting] = []
    for r in ordered:
        tier = tiers[r.session_id]
        blocked = quota_block(r, cycle.quotas, cycle.extra_sessions)
        if blocked is not None:
            waiting.append(Waiting(r, blocked=blocked))
            continue
        shape = cycle.shape_of(r)
        placement = _place(cycle, r, shape)
        if placement is not None:
            result.placements.append(placement)
            count_session(r, cycle.quotas, cycle.extra_sessions)
            continue
        if r.session_id in pending_victims:
            victims = pending_victims[r.session_id]
            deadline = max(v.ends_at for v in victims)
            waiting.append(Waiting(r, None, Code.WAITING_VICTIMS, len(victims), deadline))
            continue
        if tier <= 2 and not shape.multi_node:
            chosen = preempt(cycle, tier, shape, victims_taken, victim_tiers)
            if chosen:
                deadline = now + timedelta(seconds=policy.grace_s)
                for_tier = TIER_KEYS.get(tier, str(tier))
                for v in chosen:
                    victims_taken.add(v.session_id)
                    why = Reason(Code.PREEMPTED, {"for_tier": for_tier, "deadline": deadline})
                    result.preemptions.append(Preemption(v.session_id, r.session_id, deadline, why))
                waiting.append(Waiting(r, None, Code.WAITING_PREEMPTING, len(chosen), deadline))
                continue
        waiting.append(Waiting(r))

    explain(cycle, result, waiting, tiers)
    placed = [s for p in result.placements for s in _placement_slices(cycle, p)]
    held = [s for r in snapshot.running for s in r.slices] + placed
    used = {s.slice_id for s in placed}
    free = [s for s in snapshot.free_slices if s.slice_id not in used]
    result.alert = alert_for(utilisation(free, held), policy)
    result.holds = standing(cycle)
    return result


def _place(cycle: Cycle, r: QueuedRequest, shape: Shape) -> Placement | None:
    """:func:`_where`, with the home's reason when the request has home nodes."""
    placement = _where(cycle, r, shape)
    if placement is None or not r.home_nodes:
        return placement
    return replace(placement, reason=home_reason(cycle, r.home_nodes, placement.node_id))


def home_reason(cycle: Cycle, home_nodes: tuple[int, ...], node_id: int) -> Reason:
    """PLACED_HOME on one of the home nodes, else PLACED_AWAY naming the first of them."""
    node = cycle.nodes[node_id].hostname
    if node_id in home_nodes:
        return Reason(Code.PLACED_HOME, {"node": node})
    home = cycle.nodes.get(home_nodes[0])
    return Reason(Code.PLACED_AWAY, {"node": node, "home": home.hostname if home else "?"})


def _where(cycle: Cycle, r: QueuedRequest, shape: Shape) -> Placement | None:
    """Its booking's hold (one on a home node first), else the first home node that fits,
    else the best node, else across nodes, else a backfill; or None."""
    placement = own_hold(cycle, r, shape)
    if placement is not None:
        return placement
    cand = (at_home(cycle, shape, r.home_nodes) if r.home_nodes else None) or best(cycle, shape)
    if cand is not None:
        cycle.take(cand.node_id, cand.slices, shape.cpus, shape.memory_mb)
        return Placement(r.session_id, cand.node_id, tuple(s.slice_id for s in cand.slices))
    if shape.multi_node and shape.gpu_count > 1:
        parts = multi_node(cycle, shape)
        if parts is not None:
            for node_id, slices in parts:
                cycle.take(node_id, slices, shape.cpus, shape.memory_mb)
            (first, first_slices), *others = parts
            return Placement(
                r.session_id,
                first,
                tuple(s.slice_id for s in first_slices),
                tuple((n, tuple(s.slice_id for s in sl)) for n, sl in others),
            )
    return backfill(cycle, r, shape)


def _placement_slices(cycle: Cycle, p: Placement) -> list[FreeSlice]:
    ids = (*p.slice_ids, *(sid for _, ids in p.others for sid in ids))
    return [cycle.free_by_id[sid] for sid in ids]
