"""Properties of ``engine.plan`` on random snapshots (pure, no database)."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduling.engine import (
    TIER_KEYS,
    Booking,
    Code,
    FreeSlice,
    NodeState,
    QueuedRequest,
    Quota,
    RunningSession,
    Snapshot,
    TargetShape,
    plan,
)

NOW = datetime(2026, 12, 2, 9, 58, tzinfo=UTC)
KINDS = ("mig", "share", "whole")
SLICE_MEMORY = (2048, 4864, 9984, 20096, 40192, 81920)

QUOTA_CODES = {Code.QUOTA_SESSIONS, Code.QUOTA_GPU_HOURS, Code.QUOTA_SLICE_MEMORY}
WAITING_CODES = {
    Code.WAITING,
    Code.WAITING_HOT,
    Code.WAITING_HELD,
    Code.WAITING_VICTIMS,
    Code.WAITING_PREEMPTING,
}

PROPS = settings(max_examples=200, deadline=None)
# A fixed target workload for the fragmentation score, so that removing requests from the
# queue does not change how the others are scored (the portal passes its catalogue's mix).
WORKLOAD = (
    TargetShape(1000, 143, 1, None, 0.5),
    TargetShape(2000, 1000, 1, None, 0.3),
    TargetShape(4000, 1000, 2, None, 0.2),
)


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
    return Snapshot(nodes, free, queue, workload=WORKLOAD)


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
    alone = plan(replace(snapshot, queue=kept), NOW)
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
    again = replace(
        snapshot,
        nodes=tuple(shuffled[0]),
        free_slices=tuple(shuffled[1]),
        queue=tuple(shuffled[2]),
    )
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


# -- quotas ---------------------------------------------------------------------------------


@st.composite
def with_quotas(draw) -> Snapshot:
    """A snapshot whose requests belong to users u0-u2 and courses c0-c1, with quotas."""
    base = draw(snapshots())
    queue = tuple(
        replace(r, user=f"u{draw(st.integers(0, 2))}", course=f"c{draw(st.integers(0, 1))}")
        for r in base.queue
    )
    quotas = []
    for scope, keys in (("user", ("u0", "u1", "u2", "*")), ("course", ("c0", "c1"))):
        for key in keys:
            if draw(st.booleans()):
                quotas.append(
                    Quota(
                        scope,
                        key,
                        max_sessions=draw(st.none() | st.integers(0, 3)),
                        max_gpu_hours_week=draw(st.none() | st.sampled_from((1.0, 10.0))),
                        sessions=draw(st.integers(0, 2)),
                        gpu_hours_week=draw(st.sampled_from((0.0, 5.0, 20.0))),
                    )
                )
    return replace(base, queue=queue, quotas=tuple(quotas))


def _quota(snapshot: Snapshot, scope: str, key: str) -> Quota | None:
    by_key = {(q.scope, q.key): q for q in snapshot.quotas}
    return by_key.get((scope, key)) or by_key.get((scope, "*"))


@PROPS
@given(with_quotas())
def test_quotas_hold(snapshot):
    result = plan(snapshot, NOW)
    requests = {r.session_id: r for r in snapshot.queue}
    started: Counter[tuple[str, str]] = Counter()
    for p in result.placements:
        r = requests[p.session_id]
        for scope, key in (("user", r.user), ("course", r.course)):
            q = _quota(snapshot, scope, key)
            if q is None:
                continue
            started[(scope, q.key)] += 1
            if q.max_sessions is not None:
                assert q.sessions + started[(scope, q.key)] <= q.max_sessions
            if q.max_gpu_hours_week is not None and r.gpu_count:
                assert q.gpu_hours_week < q.max_gpu_hours_week
    for entry in result.queue:
        if entry.blocked:
            assert entry.reason.code in QUOTA_CODES and entry.position == 0 and not entry.eta
            assert entry.reason.params["scope"] in ("user", "course")
        else:
            assert entry.reason.code not in QUOTA_CODES


# -- bookings ---------------------------------------------------------------------------------


def _booked_request(session_id: int, booking: Booking) -> QueuedRequest:
    return replace(booking.shape, session_id=session_id, booking_id=booking.booking_id)


@PROPS
@given(snapshots(), st.integers(1, 4), st.integers(10, 600), st.integers(0, 3))
def test_a_booking_keeps_its_seats_from_everyone_who_would_not_end_in_time(
    snapshot, seats, starts_in_min, duration_h
):
    shape = QueuedRequest(0, 2, NOW, 1, 4000, ("mig", "share", "whole"), 1.0, 1024)
    booking = Booking(
        1, "c0", seats, NOW + timedelta(minutes=starts_in_min),
        NOW + timedelta(minutes=starts_in_min + 90), shape,
    )  # fmt: skip
    queue = tuple(replace(r, duration_s=duration_h * 3600 or 60) for r in snapshot.queue)
    # What the booking could get in an empty pool:
    alone = plan(
        replace(snapshot, queue=tuple(_booked_request(900 + i, booking) for i in range(seats))),
        NOW,
    )
    possible = len(alone.placements)
    result = plan(replace(snapshot, queue=queue, bookings=(booking,)), NOW)
    # Now let the booking's window open with what everyone else left (plus the backfills,
    # which end before it starts), and see that all the seats it could have had still fit.
    requests = {r.session_id: r for r in queue}
    left_free = {s.slice_id for s in snapshot.free_slices}
    cpus = {n.node_id: n.cpus_free for n in snapshot.nodes}
    memory = {n.node_id: n.memory_free_mb for n in snapshot.nodes}
    for p in result.placements:
        r = requests[p.session_id]
        if NOW + timedelta(seconds=r.duration_s) <= booking.starts_at:
            continue  # a backfill: gone by the time the class starts
        left_free -= set(p.slice_ids)
        cpus[p.node_id] -= r.cpus
        memory[p.node_id] -= r.memory_mb
    later = replace(
        snapshot,
        nodes=tuple(
            replace(n, cpus_free=cpus[n.node_id], memory_free_mb=memory[n.node_id])
            for n in snapshot.nodes
        ),  # fmt: skip
        free_slices=tuple(s for s in snapshot.free_slices if s.slice_id in left_free),
        queue=tuple(_booked_request(900 + i, booking) for i in range(seats)),
        bookings=(booking,),
    )
    assert len(plan(later, booking.starts_at).placements) == possible


# -- preemption ---------------------------------------------------------------------------------


@st.composite
def with_running(draw) -> Snapshot:
    """A snapshot whose pool is partly held by running sessions of every tier."""
    base = draw(snapshots())
    running = []
    for i, s in enumerate(base.free_slices):
        if draw(st.booleans()):
            running.append(
                RunningSession(
                    session_id=1000 + i,
                    tier=draw(st.integers(1, 3)),
                    node_id=s.node_id,
                    slices=(s,),
                    cpus=draw(st.sampled_from((0.0, 1.0, 2.0))),
                    memory_mb=1024,
                    started_at=NOW - timedelta(minutes=draw(st.sampled_from((1, 10, 20, 120)))),
                    ends_at=NOW + timedelta(minutes=draw(st.integers(1, 240))),
                )
            )
    held = {s.slice_id for r in running for s in r.slices}
    return replace(
        base,
        free_slices=tuple(s for s in base.free_slices if s.slice_id not in held),
        running=tuple(running),
    )


@PROPS
@given(with_running())
def test_preemption_only_takes_lower_tiers_outside_their_protected_time(snapshot):
    result = plan(snapshot, NOW)
    running = {r.session_id: r for r in snapshot.running}
    requests = {r.session_id: r for r in snapshot.queue}
    protected = timedelta(seconds=snapshot.policy.protected_runtime_s)
    victims = [p.victim_id for p in result.preemptions]
    assert len(victims) == len(set(victims))
    for p in result.preemptions:
        victim, winner = running[p.victim_id], requests[p.for_session_id]
        assert victim.tier == 3 or (victim.tier == 2 and winner.tier <= 1)
        assert victim.tier > winner.tier and victim.tier != 1
        assert NOW - victim.started_at >= protected
        assert p.deadline == NOW + timedelta(seconds=snapshot.policy.grace_s)
        assert p.for_session_id not in {x.session_id for x in result.placements}
    waiting = {q.session_id: q for q in result.queue}
    for q in waiting.values():
        if q.eta is not None:
            assert q.eta >= NOW


# -- reasons and holds ----------------------------------------------------------------------------


@PROPS
@given(with_running(), st.integers(0, 4), st.integers(-60, 600))
def test_reasons_carry_their_parameters_and_standing_holds_are_free_and_unplaced(
    snapshot, seats, starts_in_min
):
    shape = QueuedRequest(0, 2, NOW, 1, 4000, ("mig", "whole"), 1.0, 1024)
    booking = Booking(
        1, "c0", seats, NOW + timedelta(minutes=starts_in_min),
        NOW + timedelta(minutes=starts_in_min + 90), shape,
    )  # fmt: skip
    result = plan(replace(snapshot, bookings=(booking,)), NOW)
    requests = {r.session_id: r for r in snapshot.queue}
    for entry in result.queue:
        reason, r = entry.reason, requests[entry.session_id]
        if reason.code == Code.NO_FIT:
            # What it needs; ``short`` and the largest node's figures only where no node
            # is that large at all (the snapshots here give no node's whole size).
            assert reason.params == {
                "gpu_count": r.gpu_count,
                "memory_mb": r.gpu_memory_min_mb,
                "kinds": list(r.allowed_kinds),
                "models": list(r.gpu_models),
                "cpus": r.cpus,
                "ram_mb": r.memory_mb,
            }
            continue
        if reason.code == Code.POOL_CLOSED:
            # No healthy node takes new work: no fit is judged and no start estimated.
            assert not any(n.healthy for n in snapshot.nodes)
            assert set(reason.params) == {"tier", "ahead", "higher"} and entry.eta is None
            continue
        assert reason.code in WAITING_CODES
        p = reason.params
        assert p["tier"] in TIER_KEYS.values()
        assert p["ahead"] + p["higher"] == entry.position - 1
        assert (p["gpu_count"], p["memory_mb"]) == (r.gpu_count, r.gpu_memory_min_mb)
        if reason.code in (Code.WAITING_VICTIMS, Code.WAITING_PREEMPTING):
            assert p["count"] >= 1 and p["deadline"] == entry.eta
    for p in result.preemptions:
        assert p.reason.code == Code.PREEMPTED
        assert p.reason.params["deadline"] == p.deadline
        assert p.reason.params["for_tier"] in TIER_KEYS.values()
    free = {s.slice_id: s for s in snapshot.free_slices}
    placed = {sid for p in result.placements for sid in p.slice_ids}
    held = [sid for h in result.holds for sid in h.slice_ids]
    assert len(held) == len(set(held)) and not placed & set(held)
    for h in result.holds:
        assert h.booking_id == 1 and len(h.slice_ids) == 1
        assert all(free[sid].node_id == h.node_id for sid in h.slice_ids)
    assert len(result.holds) <= seats
    if booking.ends_at <= NOW:
        assert result.holds == []
    assert result.alert is not None and result.alert.reason.code in (
        Code.POOL_OK,
        Code.POOL_WARN,
        Code.POOL_BLOCKED,
    )
