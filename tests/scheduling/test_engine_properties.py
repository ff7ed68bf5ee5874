"""Properties of ``engine.plan`` on random snapshots (pure, no database)."""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduling.engine import FreeSlice, NodeState, Plan, QueuedRequest, Snapshot, plan
from scheduling.engine.model import TIER_NAMES, Placement, QueueEntry

NOW = datetime(2026, 12, 2, 9, 58, tzinfo=UTC)
KINDS = ("mig", "share", "whole")
SLICE_MEMORY = (2048, 4864, 9984, 20096, 40192, 81920)

PROPS = settings(max_examples=200, deadline=None)


@st.composite
def snapshots(draw) -> Snapshot:
    n_nodes = draw(st.integers(1, 4))
    nodes = tuple(
        NodeState(
            node_id=i,
            hostname=f"n{i}",
            healthy=draw(st.booleans() | st.just(True)),
            cpus_free=draw(st.sampled_from((0.0, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0))),
            memory_free_mb=draw(st.sampled_from((0, 1024, 8192, 32768, 65536))),
        )
        for i in draw(st.permutations(range(1, n_nodes + 1)))
    )
    shapes = draw(
        st.lists(
            st.tuples(
                st.integers(1, n_nodes),  # node
                st.integers(0, 3),  # GPU on that node
                st.sampled_from(KINDS),
                st.sampled_from(SLICE_MEMORY),
            ),
            max_size=12,
        )
    )
    ids = draw(st.permutations(range(1, len(shapes) + 1)))
    free = tuple(
        FreeSlice(sid, node_id, node_id * 10 + gpu, kind, memory, "A100")
        for sid, (node_id, gpu, kind, memory) in zip(ids, shapes, strict=True)
    )
    requests = draw(
        st.lists(
            st.tuples(
                st.integers(0, 3),  # tier
                st.integers(0, 5),  # minutes ago (ties likely)
                st.integers(0, 2),  # gpu_count
                st.sampled_from((0, 2048, 4000, 9984, 40000)),
                st.lists(st.sampled_from(KINDS), max_size=3, unique=True).map(tuple),
                st.sampled_from((0.0, 0.5, 1.0, 2.0, 4.0, 8.0)),
                st.sampled_from((0, 1024, 8192, 32768)),
            ),
            max_size=10,
        )
    )
    session_ids = draw(st.permutations(range(1, len(requests) + 1)))
    queue = tuple(
        QueuedRequest(sid, tier, NOW - timedelta(minutes=ago), count, mem_min, kinds, cpus, mem)
        for sid, (tier, ago, count, mem_min, kinds, cpus, mem) in zip(
            session_ids, requests, strict=True
        )
    )
    return Snapshot(nodes, free, queue)


def _order_key(r: QueuedRequest):
    return (r.tier, r.submitted_at, r.session_id)


def _fits(request: QueuedRequest, node: NodeState, cpus, memory, free: list[FreeSlice]) -> bool:
    """Independent check: could ``request`` go on ``node`` with this capacity left?"""
    if not node.healthy or cpus < request.cpus or memory < request.memory_mb:
        return False
    gpus = {
        s.gpu_id
        for s in free
        if s.kind in request.allowed_kinds and s.memory_mb >= request.gpu_memory_min_mb
    }
    n_slices = sum(
        1
        for s in free
        if s.kind in request.allowed_kinds and s.memory_mb >= request.gpu_memory_min_mb
    )
    if request.gpu_count <= 1:
        return n_slices >= request.gpu_count
    return len(gpus) >= request.gpu_count


def _reference_plan(snapshot: Snapshot, now: datetime) -> Plan:
    """The planner's first version, kept verbatim in spirit: a plain scan of every node."""
    nodes = {n.node_id: n for n in snapshot.nodes}
    cpus_free = {n.node_id: n.cpus_free for n in snapshot.nodes}
    memory_free = {n.node_id: n.memory_free_mb for n in snapshot.nodes}
    free_by_node: dict[int, list[FreeSlice]] = defaultdict(list)
    for s in snapshot.free_slices:
        free_by_node[s.node_id].append(s)
    result = Plan()
    waiting = []
    for request in sorted(snapshot.queue, key=_order_key):
        placement = None
        for node_id in sorted(nodes):
            if not nodes[node_id].healthy:
                continue
            if cpus_free[node_id] < request.cpus or memory_free[node_id] < request.memory_mb:
                continue
            if request.gpu_count == 0:
                placement = Placement(request.session_id, node_id, ())
                break
            fitting = [
                s
                for s in free_by_node[node_id]
                if s.kind in request.allowed_kinds and s.memory_mb >= request.gpu_memory_min_mb
            ]
            if len(fitting) < request.gpu_count:
                continue
            fitting.sort(key=lambda s: (s.memory_mb, s.gpu_id, s.slice_id))
            chosen: list[FreeSlice] = []
            used: set[int] = set()
            for c in fitting:
                if request.gpu_count > 1 and c.gpu_id in used:
                    continue
                chosen.append(c)
                used.add(c.gpu_id)
                if len(chosen) == request.gpu_count:
                    placement = Placement(
                        request.session_id, node_id, tuple(s.slice_id for s in chosen)
                    )
                    break
            if placement is not None:
                break
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


@PROPS
@given(snapshots())
def test_placements_are_feasible_and_never_share_a_slice(snapshot):
    result = plan(snapshot, NOW)
    nodes = {n.node_id: n for n in snapshot.nodes}
    free = {s.slice_id: s for s in snapshot.free_slices}
    requests = {r.session_id: r for r in snapshot.queue}
    given_out = [sid for p in result.placements for sid in p.slice_ids]
    assert len(given_out) == len(set(given_out)), "a slice was given twice"
    cpus: Counter[int] = Counter()
    memory: Counter[int] = Counter()
    for p in result.placements:
        r = requests[p.session_id]
        node = nodes[p.node_id]
        assert node.healthy
        assert len(p.slice_ids) == r.gpu_count
        gpus = set()
        for sid in p.slice_ids:
            s = free[sid]  # every placed slice was free
            assert s.node_id == p.node_id
            assert s.kind in r.allowed_kinds
            assert s.memory_mb >= r.gpu_memory_min_mb
            gpus.add(s.gpu_id)
        assert len(gpus) == len(p.slice_ids), "multi-GPU placement reuses a GPU"
        cpus[p.node_id] += r.cpus
        memory[p.node_id] += r.memory_mb
    for node_id in cpus:
        assert cpus[node_id] <= nodes[node_id].cpus_free + 1e-9
        assert memory[node_id] <= nodes[node_id].memory_free_mb


@PROPS
@given(snapshots(), st.integers(0, 3))
def test_lower_tiers_never_change_what_higher_tiers_get(snapshot, tier):
    full = plan(snapshot, NOW)
    kept = tuple(r for r in snapshot.queue if r.tier <= tier)
    ids = {r.session_id for r in kept}
    alone = plan(Snapshot(snapshot.nodes, snapshot.free_slices, kept), NOW)
    assert alone.placements == [p for p in full.placements if p.session_id in ids]


@PROPS
@given(snapshots())
def test_no_waiting_request_fits_what_those_ahead_of_it_left(snapshot):
    """Checked with an independent fit test, so lower tiers (served later) took nothing from it."""
    result = plan(snapshot, NOW)
    placed = {p.session_id: p for p in result.placements}
    nodes = {n.node_id: n for n in snapshot.nodes}
    cpus = {n.node_id: n.cpus_free for n in snapshot.nodes}
    memory = {n.node_id: n.memory_free_mb for n in snapshot.nodes}
    free = list(snapshot.free_slices)
    for r in sorted(snapshot.queue, key=_order_key):
        p = placed.get(r.session_id)
        if p is None:
            for node_id, node in nodes.items():
                here = [s for s in free if s.node_id == node_id]
                assert not _fits(r, node, cpus[node_id], memory[node_id], here), (
                    f"request {r.session_id} waits but fits node {node_id}"
                )
            continue
        cpus[p.node_id] -= r.cpus
        memory[p.node_id] -= r.memory_mb
        free = [s for s in free if s.slice_id not in p.slice_ids]


@PROPS
@given(snapshots(), st.randoms(use_true_random=False))
def test_the_plan_is_deterministic_and_ignores_input_order(snapshot, rnd: random.Random):
    first = plan(snapshot, NOW)
    assert plan(snapshot, NOW) == first
    shuffled = [list(snapshot.nodes), list(snapshot.free_slices), list(snapshot.queue)]
    for part in shuffled:
        rnd.shuffle(part)
    again = Snapshot(tuple(shuffled[0]), tuple(shuffled[1]), tuple(shuffled[2]))
    assert plan(again, NOW) == first


@PROPS
@given(snapshots())
def test_queue_positions_are_dense_and_in_tier_then_age_order(snapshot):
    result = plan(snapshot, NOW)
    assert [q.position for q in result.queue] == list(range(1, len(result.queue) + 1))
    requests = {r.session_id: r for r in snapshot.queue}
    waiting = [requests[q.session_id] for q in result.queue]
    assert waiting == sorted(waiting, key=_order_key)
    everyone = [p.session_id for p in result.placements] + [q.session_id for q in result.queue]
    assert sorted(everyone) == sorted(requests)


@PROPS
@given(snapshots())
def test_the_indexed_planner_matches_a_plain_scan(snapshot):
    assert plan(snapshot, NOW) == _reference_plan(snapshot, NOW)
