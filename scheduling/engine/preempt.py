"""Preemption: which running sessions a waiting request may stop to start.

A booked, thesis or coursework request that still cannot start may preempt running sessions
of a lower tier: hobby before coursework, never thesis, never a booked class in its window,
never a session inside its protected runtime, never one already in its grace. On each node the
fewest victims that free enough are chosen with the least lost work (runtime x GPU share); the
node with the cheapest set wins. The planner gives the victims the grace period.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta

from .model import TIER_BOOKED, TIER_THESIS, RunningSession
from .pool import Cycle, Shape


def lost_work(v: RunningSession, now: datetime) -> float:
    """What stopping the session loses: its runtime so far x its GPU share (milli)."""
    return (now - v.started_at).total_seconds() * sum(s.milli for s in v.slices)


def preempt(
    cycle: Cycle,
    tier: int,
    shape: Shape,
    taken: set[int],
    victim_tiers: dict[int, int],
) -> list[RunningSession]:
    """The cheapest set of victims on one node that lets a request of ``tier`` and ``shape``
    start there, or []. ``taken``: sessions already preempted this cycle; ``victim_tiers``:
    each running session's effective tier (a booked class in its window is tier 0)."""
    now, policy = cycle.now, cycle.policy
    protected = timedelta(seconds=policy.protected_runtime_s)
    by_node: dict[int, list[RunningSession]] = defaultdict(list)
    for v in cycle.snapshot.running:
        if v.session_id in taken or v.preempted_for is not None or v.node_id not in cycle.position:
            continue
        if cycle.nodes[v.node_id].rack in cycle.stopped_racks:
            continue  # its place would be new work on a rack at its power warning
        vt = victim_tiers[v.session_id]
        if vt <= tier or vt in (TIER_BOOKED, TIER_THESIS) or now - v.started_at < protected:
            continue
        by_node[v.node_id].append(v)
    found: tuple[tuple, list[RunningSession]] | None = None
    for node_id in sorted(by_node):
        candidates = sorted(
            by_node[node_id],
            key=lambda v: (-victim_tiers[v.session_id], lost_work(v, now), v.session_id),
        )
        chosen: list[RunningSession] = []
        for v in candidates:
            chosen.append(v)
            if _fits_after(cycle, node_id, shape, chosen):
                cost = (
                    sum(1 for c in chosen if victim_tiers[c.session_id] < 3),
                    sum(lost_work(c, now) for c in chosen),
                    len(chosen),
                    node_id,
                )
                if found is None or cost < found[0]:
                    found = (cost, list(chosen))
                break
    if found is None:
        return []
    # Trim victims the request does not need (a later, bigger one may have sufficed alone).
    chosen = found[1]
    node_id = chosen[0].node_id
    for v in sorted(chosen, key=lambda v: (victim_tiers[v.session_id], -lost_work(v, now))):
        rest = [c for c in chosen if c is not v]
        if rest and _fits_after(cycle, node_id, shape, rest):
            chosen = rest
    return chosen


def _fits_after(cycle: Cycle, node_id: int, shape: Shape, victims: list[RunningSession]) -> bool:
    """Would the shape fit the node once these victims have stopped?"""
    if cycle.cpus[node_id] + sum(v.cpus for v in victims) < shape.cpus:
        return False
    if cycle.memory[node_id] + sum(v.memory_mb for v in victims) < shape.memory_mb:
        return False
    if shape.gpu_count == 0:
        return True
    limit = cycle.policy.temperature_limit_c
    gpus = {s.gpu_id for s in cycle.per_gpu(shape, node_id)}
    for v in victims:
        for s in v.slices:
            if cycle.fits(shape, s) and (s.temperature_c is None or s.temperature_c < limit):
                gpus.add(s.gpu_id)
    return len(gpus) >= shape.gpu_count
