"""Walking-skeleton placement: tier order, then first fit on the smallest slice that will do.

The real engine (fair share, fragmentation-aware scoring, preemption) replaces the body of
:func:`plan`; the boundary stays ``plan(snapshot, now) -> Plan``.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime

from .model import (
    TIER_NAMES,
    FreeSlice,
    NodeState,
    Placement,
    Plan,
    QueuedRequest,
    QueueEntry,
    Snapshot,
)


def _order(queue: tuple[QueuedRequest, ...]) -> list[QueuedRequest]:
    return sorted(queue, key=lambda r: (r.tier, r.submitted_at, r.session_id))


def _fits_slice(request: QueuedRequest, candidate: FreeSlice) -> bool:
    return (
        candidate.kind in request.allowed_kinds and candidate.memory_mb >= request.gpu_memory_min_mb
    )


def _place_one(
    request: QueuedRequest,
    nodes: dict[int, NodeState],
    cpus_free: dict[int, float],
    memory_free: dict[int, int],
    free_by_node: dict[int, list[FreeSlice]],
) -> Placement | None:
    """The first healthy node (by id) with room; on it the smallest fitting slices."""
    for node_id in sorted(nodes):
        node = nodes[node_id]
        if not node.healthy:
            continue
        if cpus_free[node_id] < request.cpus or memory_free[node_id] < request.memory_mb:
            continue
        if request.gpu_count == 0:
            return Placement(request.session_id, node_id, ())
        fitting = [s for s in free_by_node[node_id] if _fits_slice(request, s)]
        if len(fitting) < request.gpu_count:
            continue
        fitting.sort(key=lambda s: (s.memory_mb, s.gpu_id, s.slice_id))
        chosen: list[FreeSlice] = []
        used_gpus: set[int] = set()
        for candidate in fitting:
            # A multi-GPU request needs distinct GPUs.
            if request.gpu_count > 1 and candidate.gpu_id in used_gpus:
                continue
            chosen.append(candidate)
            used_gpus.add(candidate.gpu_id)
            if len(chosen) == request.gpu_count:
                return Placement(request.session_id, node_id, tuple(s.slice_id for s in chosen))
    return None


def plan(snapshot: Snapshot, now: datetime) -> Plan:
    """Place what fits in tier order; give every request left waiting a position and reason."""
    nodes = {n.node_id: n for n in snapshot.nodes}
    cpus_free = {n.node_id: n.cpus_free for n in snapshot.nodes}
    memory_free = {n.node_id: n.memory_free_mb for n in snapshot.nodes}
    free_by_node: dict[int, list[FreeSlice]] = defaultdict(list)
    for free in snapshot.free_slices:
        free_by_node[free.node_id].append(free)

    result = Plan()
    waiting: list[QueuedRequest] = []
    for request in _order(snapshot.queue):
        placement = _place_one(request, nodes, cpus_free, memory_free, free_by_node)
        if placement is None:
            waiting.append(request)
            continue
        result.placements.append(placement)
        cpus_free[placement.node_id] -= request.cpus
        memory_free[placement.node_id] -= request.memory_mb
        taken = set(placement.slice_ids)
        free_by_node[placement.node_id] = [
            s for s in free_by_node[placement.node_id] if s.slice_id not in taken
        ]

    ahead_in_tier: dict[int, int] = defaultdict(int)
    for position, request in enumerate(waiting, start=1):
        tier_name = TIER_NAMES.get(request.tier, f"tier {request.tier}")
        ahead = ahead_in_tier[request.tier]
        ahead_in_tier[request.tier] += 1
        reason = (
            f"waiting for a free slice: {ahead} ahead of you in {tier_name}"
            if ahead
            else f"waiting for a free slice: next in {tier_name}"
        )
        if position > ahead + 1:
            reason += f", {position - ahead - 1} in higher tiers"
        result.queue.append(QueueEntry(request.session_id, position, reason))
    return result
