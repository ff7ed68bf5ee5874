"""Why each request waits, and when it should start: the queue part of the plan.

Every request left waiting gets a ``QueueEntry``: a position (blocked ones get 0), a
:class:`~scheduling.engine.reasons.Reason` and an estimated start (:func:`estimate`). Waiting
reasons carry ``tier`` (a ``TIER_KEYS`` key), ``ahead`` (waiting ahead of it in its tier),
``higher`` (waiting in higher tiers), ``gpu_count`` and ``memory_mb``:

- ``WAITING_VICTIMS`` / ``WAITING_PREEMPTING`` (+ ``count``, ``deadline``): it starts when
  ``count`` desktops preempted for it stop at ``deadline`` (their grace), preempted in an
  earlier cycle / in this one;
- ``WAITING_HOT`` (+ ``limit_c``): the free slices that fit are at or above the temperature
  limit;
- ``WAITING_HELD``: what is free that fits is held for a class booking;
- ``WAITING``: nothing that fits is free.

``NO_FIT`` (``gpu_count``, ``memory_mb``, ``kinds``, ``models``): no healthy node could ever
run the request.

``POOL_CLOSED`` (``tier``, ``ahead``, ``higher``): no healthy node takes new work at all (every
one cordoned, draining or silent): the pool is closed, so nothing is said about fit and no
start is estimated.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta

from .holds import hold_fits
from .model import TIER_KEYS, Plan, QueuedRequest, QueueEntry, Snapshot, expected_duration_s
from .pool import Cycle
from .reasons import Code, Reason


@dataclass
class Waiting:
    """A request the plan did not place, as the planner left it."""

    request: QueuedRequest
    blocked: Reason | None = None  # a quota stops it
    # It starts when desktops preempted for it stop: WAITING_VICTIMS or WAITING_PREEMPTING.
    victims: Code | None = None
    count: int = 0  # how many
    deadline: datetime | None = None  # when the last one stops (its estimated start)


def explain(cycle: Cycle, result: Plan, waiting: list[Waiting], tiers: dict[int, int]) -> None:
    """Append a queue entry to ``result`` for each waiting request, in serving order."""
    durations = {r.session_id: expected_duration_s(r, cycle.policy) for r in cycle.snapshot.queue}
    busy = {
        sid: cycle.now + timedelta(seconds=durations[p.session_id])
        for p in result.placements
        for sid in (*p.slice_ids, *(x for _, ids in p.others for x in ids))
    }
    unknown = [w.request for w in waiting if w.blocked is None and w.victims is None]
    etas = estimate(cycle, unknown, busy)
    ahead_in_tier: dict[int, int] = defaultdict(int)
    position = 0
    for w in waiting:
        r = w.request
        if w.blocked is not None:
            result.queue.append(QueueEntry(r.session_id, 0, w.blocked, None, True))
            continue
        position += 1
        tier = tiers[r.session_id]
        ahead = ahead_in_tier[tier]
        ahead_in_tier[tier] += 1
        extra: dict[str, object]
        if not cycle.order:
            closed = {"tier": TIER_KEYS.get(tier, str(tier)), "ahead": ahead}
            closed["higher"] = position - ahead - 1
            result.queue.append(
                QueueEntry(r.session_id, position, Reason(Code.POOL_CLOSED, closed), None, False)
            )
            continue
        if w.victims is not None:
            code, eta = w.victims, w.deadline
            extra = {"count": w.count, "deadline": w.deadline}
        else:
            eta = etas.get(r.session_id)
            never = no_fit(cycle, r)
            if never is not None:
                result.queue.append(QueueEntry(r.session_id, position, never, eta, False))
                continue
            code, extra = _why_waiting(cycle, r)
        params = {
            "tier": TIER_KEYS.get(tier, str(tier)),
            "ahead": ahead,
            "higher": position - ahead - 1,
            "gpu_count": r.gpu_count,
            "memory_mb": r.gpu_memory_min_mb,
            **extra,
        }
        result.queue.append(QueueEntry(r.session_id, position, Reason(code, params), eta, False))


def static_fit(cycle: Cycle, r: QueuedRequest) -> bool:
    """Could this request ever run in the pool as it is (ignoring what is busy)?

    Only healthy nodes whose whole CPU and memory hold one desktop of it count
    (``NodeState.could_hold``), and of them only slices of its kind, memory, model and
    compute; a multi-GPU request needs that many GPUs on one node (or, multi-node, in all)."""
    shape = cycle.shape_of(r)
    if shape in cycle.static_fit:
        return cycle.static_fit[shape]
    roomy = {n for n in cycle.order if cycle.nodes[n].could_hold(shape.cpus, shape.memory_mb)}
    matching = [x for x in cycle.matching(shape) if x.node_id in roomy]
    if r.gpu_count == 0:
        ok = bool(roomy)
    elif r.gpu_count == 1:
        ok = bool(matching)
    else:
        gpus: dict[int, set[int]] = defaultdict(set)
        for x in matching:
            gpus[x.node_id].add(x.gpu_id)
        if r.multi_node:
            ok = sum(len(g) for g in gpus.values()) >= r.gpu_count
        else:
            ok = any(len(g) >= r.gpu_count for g in gpus.values())
    cycle.static_fit[shape] = ok
    return ok


def no_fit(cycle: Cycle, r: QueuedRequest) -> Reason | None:
    """``NO_FIT`` when no healthy node of the pool could ever run the request, else None.

    Its parameters say what it needs (``gpu_count``, ``memory_mb``, ``kinds``, ``models``,
    ``cpus``, ``ram_mb``) and, where no healthy node is that large at all, ``short``: the
    resources no node has enough of (``cpus``, ``ram``), with the most a node has
    (``most_cpus``, ``most_ram_mb``)."""
    if static_fit(cycle, r):
        return None
    params: dict[str, object] = {
        "gpu_count": r.gpu_count,
        "memory_mb": r.gpu_memory_min_mb,
        "kinds": list(r.allowed_kinds),
        "models": list(r.gpu_models),
        "cpus": r.cpus,
        "ram_mb": r.memory_mb,
    }
    nodes = [cycle.nodes[n] for n in cycle.order]
    cpus = [n.cpus_total for n in nodes if n.cpus_total is not None]
    ram = [n.memory_total_mb for n in nodes if n.memory_total_mb is not None]
    short = []
    if cpus and max(cpus) + 1e-9 < r.cpus:
        short.append("cpus")
        params["most_cpus"] = max(cpus)
    if ram and max(ram) < r.memory_mb:
        short.append("ram")
        params["most_ram_mb"] = max(ram)
    if short:
        params["short"] = short
    return Reason(Code.NO_FIT, params)


def never_fits(snapshot: Snapshot, request: QueuedRequest, now: datetime) -> Reason | None:
    """``NO_FIT`` (see :func:`no_fit`) when no healthy node of the snapshot's pool could
    ever run ``request``, however empty; None when one could. The scheduler's own rule, for
    the request form and the submit check."""
    return no_fit(Cycle(snapshot, now), request)


def _why_waiting(cycle: Cycle, r: QueuedRequest) -> tuple[Code, dict[str, object]]:
    """The waiting code of a request that could run in this pool, with its extra params."""
    shape = cycle.shape_of(r)
    if any(cycle.fits(shape, s) for s in cycle.hot):
        return Code.WAITING_HOT, {"limit_c": cycle.policy.temperature_limit_c}
    if any(hold_fits(cycle, h, shape) for holds in cycle.holds.values() for h in holds):
        return Code.WAITING_HELD, {}
    return Code.WAITING, {}


def estimate(
    cycle: Cycle, waiting: list[QueuedRequest], busy: dict[int, datetime]
) -> dict[int, datetime]:
    """Estimated starts: replay expected ends of running sessions against the queue in order.

    Every slice gets the time it will next be free (now if free, a running session's expected
    end, a hold's booking end). Each waiting request in queue order takes the earliest slices
    that fit it (distinct GPUs of one node for multi-GPU) and keeps them busy for its expected
    duration; its start is when those slices are free. CPU and RAM are not replayed (slices are
    the scarce part), and a request no slice fits gets no estimate.
    """
    now, policy = cycle.now, cycle.policy
    free_at: dict[int, datetime] = {}
    for s in cycle.snapshot.free_slices:
        if s.node_id in cycle.position:
            free_at[s.slice_id] = now
    for v in cycle.snapshot.running:
        for s in v.slices:
            if s.node_id in cycle.position:
                free_at[s.slice_id] = max(v.ends_at, now)
    for sid, until in busy.items():
        free_at[sid] = until
    for holds in cycle.holds.values():
        for h in holds:
            for s in h.slices:
                free_at[s.slice_id] = max(h.booking.ends_at, now)
    # Shapes that differ only in CPU and RAM match the same slices: they share a heap.
    slice_heaps: dict[tuple, list[tuple[datetime, int]]] = {}
    groups: dict[tuple, dict[int, dict[int, list[int]]]] = {}
    node_of = {x.slice_id: x.node_id for group in cycle.types.values() for x in group}
    version: dict[int, int] = defaultdict(int)  # bumped when a node's slice times change
    starts: dict[tuple, tuple[int, datetime, list[int]]] = {}  # (key, k, node) -> per version
    out: dict[int, datetime] = {}
    for r in waiting:
        if r.gpu_count == 0:
            out[r.session_id] = now
            continue
        shape = cycle.shape_of(r)
        key = (shape.kinds, shape.memory_min, shape.models, shape.compute_min, shape.memory_max)
        busy_for = timedelta(seconds=expected_duration_s(r, policy))
        if r.gpu_count == 1:
            heap = slice_heaps.get(key)
            if heap is None:
                heap = [(free_at[x.slice_id], x.slice_id) for x in cycle.matching(shape)]
                heapq.heapify(heap)
                slice_heaps[key] = heap
            while heap and heap[0][0] != free_at[heap[0][1]]:  # later since it was pushed
                heapq.heapreplace(heap, (free_at[heap[0][1]], heap[0][1]))
            if heap:
                start, sid = heap[0]
                free_at[sid] = start + busy_for
                version[node_of.get(sid, 0)] += 1
                heapq.heapreplace(heap, (free_at[sid], sid))
                out[r.session_id] = start
            continue
        by_node = groups.get(key)
        if by_node is None:
            by_node = defaultdict(lambda: defaultdict(list))
            for x in cycle.matching(shape):
                by_node[x.node_id][x.gpu_id].append(x.slice_id)
            groups[key] = by_node
        k = r.gpu_count
        earliest: tuple[datetime, int, list[int]] | None = None
        for node_id, per_gpu in by_node.items():
            if len(per_gpu) < k:
                continue
            cached = starts.get((key, k, node_id))
            if cached is None or cached[0] != version[node_id]:
                firsts = sorted(min((free_at[x], x) for x in sids) for sids in per_gpu.values())
                cached = (version[node_id], firsts[k - 1][0], [x for _, x in firsts[:k]])
                starts[(key, k, node_id)] = cached
            if earliest is None or (cached[1], node_id) < earliest[:2]:
                earliest = (cached[1], node_id, cached[2])
        if earliest is not None:
            for sid in earliest[2]:
                free_at[sid] = earliest[0] + busy_for
            version[earliest[1]] += 1
            out[r.session_id] = earliest[0]
    return out
