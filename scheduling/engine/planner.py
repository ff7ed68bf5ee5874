"""Walking-skeleton placement: tier order, then first fit on the smallest slice that will do.

The real engine (fair share, fragmentation-aware scoring, preemption) replaces the body of
:func:`plan`; the boundary stays ``plan(snapshot, now) -> Plan``.

Speed (same result as a plain scan of every node for every request): free slices are indexed
per node and kind, sorted by ``(memory_mb, gpu_id, slice_id)``, so the fitting slices of a node
are a suffix found by bisection. Within one cycle free capacity only shrinks (slices are taken,
CPU and RAM are consumed), so a node that cannot take a request shape now never can later in
the cycle: each shape keeps a cursor into the node order and resumes there, and a shape whose
cursor ran off the end is refused at once. (The cursor is only used when no request in the
queue has negative CPU or RAM, which would give capacity back.)
"""

from __future__ import annotations

from bisect import bisect_left
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


def _slice_key(s: FreeSlice) -> tuple[int, int, int]:
    return (s.memory_mb, s.gpu_id, s.slice_id)


class _NodeSlices:
    """One node's free slices by kind, each list sorted by ``(memory_mb, gpu_id, slice_id)``."""

    __slots__ = ("by_kind", "memory")

    def __init__(self, slices: list[FreeSlice]) -> None:
        grouped: dict[str, list[FreeSlice]] = defaultdict(list)
        for s in slices:
            grouped[s.kind].append(s)
        self.by_kind: dict[str, list[FreeSlice]] = {}
        self.memory: dict[str, list[int]] = {}
        for kind, group in grouped.items():
            group.sort(key=_slice_key)
            self.by_kind[kind] = group
            self.memory[kind] = [s.memory_mb for s in group]

    def fitting(self, kinds: tuple[str, ...], memory_min: int, need: int) -> list[FreeSlice]:
        """Slices of an allowed kind with enough memory, smallest first ([] if fewer than need)."""
        parts = []
        total = 0
        for kind in kinds:
            group = self.by_kind.get(kind)
            if not group:
                continue
            start = bisect_left(self.memory[kind], memory_min)
            if start < len(group):
                parts.append(group[start:])
                total += len(group) - start
        if total < need or not parts:
            return []
        if len(parts) == 1:
            return parts[0]
        merged = [s for part in parts for s in part]
        merged.sort(key=_slice_key)
        return merged

    def take(self, slice_ids: set[int]) -> None:
        for kind, group in self.by_kind.items():
            if any(s.slice_id in slice_ids for s in group):
                kept = [s for s in group if s.slice_id not in slice_ids]
                self.by_kind[kind] = kept
                self.memory[kind] = [s.memory_mb for s in kept]


def _choose(request: QueuedRequest, fitting: list[FreeSlice]) -> tuple[int, ...] | None:
    """The smallest fitting slices; a multi-GPU request needs distinct GPUs."""
    chosen: list[int] = []
    used_gpus: set[int] = set()
    for candidate in fitting:
        if request.gpu_count > 1 and candidate.gpu_id in used_gpus:
            continue
        chosen.append(candidate.slice_id)
        used_gpus.add(candidate.gpu_id)
        if len(chosen) == request.gpu_count:
            return tuple(chosen)
    return None


def plan(snapshot: Snapshot, now: datetime) -> Plan:
    """Place what fits in tier order; give every request left waiting a position and reason.

    Each request goes to the first healthy node (by id) with CPU and RAM headroom and enough
    fitting slices; on it the smallest fitting slices are taken.
    """
    nodes: dict[int, NodeState] = {n.node_id: n for n in snapshot.nodes}
    cpus_free = {n.node_id: n.cpus_free for n in snapshot.nodes}
    memory_free = {n.node_id: n.memory_free_mb for n in snapshot.nodes}
    grouped: dict[int, list[FreeSlice]] = defaultdict(list)
    for free in snapshot.free_slices:
        grouped[free.node_id].append(free)
    order = [node_id for node_id in sorted(nodes) if nodes[node_id].healthy]
    slices = {node_id: _NodeSlices(grouped.get(node_id, [])) for node_id in order}
    monotone = all(r.cpus >= 0 and r.memory_mb >= 0 for r in snapshot.queue)
    cursors: dict[tuple, int] = {}

    result = Plan()
    waiting: list[QueuedRequest] = []
    for request in _order(snapshot.queue):
        kinds = tuple(dict.fromkeys(request.allowed_kinds))
        shape = (
            request.gpu_count,
            request.gpu_memory_min_mb,
            kinds,
            request.cpus,
            request.memory_mb,
        )
        i = cursors.get(shape, 0) if monotone else 0
        placement = None
        while i < len(order):
            node_id = order[i]
            if cpus_free[node_id] >= request.cpus and memory_free[node_id] >= request.memory_mb:
                if request.gpu_count == 0:
                    placement = Placement(request.session_id, node_id, ())
                    break
                fitting = slices[node_id].fitting(
                    kinds, request.gpu_memory_min_mb, request.gpu_count
                )
                chosen = _choose(request, fitting) if fitting else None
                if chosen is not None:
                    placement = Placement(request.session_id, node_id, chosen)
                    break
            i += 1
        if monotone:
            cursors[shape] = i
        if placement is None:
            waiting.append(request)
            continue
        result.placements.append(placement)
        cpus_free[placement.node_id] -= request.cpus
        memory_free[placement.node_id] -= request.memory_mb
        if placement.slice_ids:
            slices[placement.node_id].take(set(placement.slice_ids))

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
