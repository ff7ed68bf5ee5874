"""The engine is a pure function of snapshot and clock: tested without a database."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from scheduling.engine import (
    Booking,
    BookingHold,
    Code,
    FreeSlice,
    NodeState,
    Policy,
    QueuedRequest,
    Quota,
    Rack,
    Reason,
    RunningSession,
    Snapshot,
    admission_block,
    admission_may_block,
    alert_for,
    index_quotas,
    plan,
    quota_block,
)
from scheduling.engine.scoring import TargetShape, WorkloadMix, strand_growth

NOW = datetime(2026, 12, 2, 9, 58, tzinfo=UTC)


def request(session_id: int, tier: int, minutes_ago: int = 0, **overrides) -> QueuedRequest:
    fields = dict(
        session_id=session_id,
        tier=tier,
        submitted_at=NOW - timedelta(minutes=minutes_ago),
        gpu_count=1,
        gpu_memory_min_mb=4000,
        allowed_kinds=("mig", "share"),
        cpus=1.0,
        memory_mb=1024,
    )
    fields.update(overrides)
    return QueuedRequest(**fields)


def node(node_id: int, healthy: bool = True, cpus: float = 64) -> NodeState:
    return NodeState(node_id, f"n{node_id}", healthy, cpus, 262144)


def mig(slice_id: int, node_id: int = 1, gpu_id: int = 1, memory: int = 9984, **kw) -> FreeSlice:
    return FreeSlice(slice_id, node_id, gpu_id, "mig", memory, "A100", **kw)


def whole(slice_id: int, node_id: int, gpu_id: int, **kw) -> FreeSlice:
    return FreeSlice(slice_id, node_id, gpu_id, "whole", 81920, "A100", **kw)


def running(session_id: int, tier: int, slices, minutes: int = 60, ends_in: int = 60, **kw):
    return RunningSession(
        session_id=session_id,
        tier=tier,
        node_id=slices[0].node_id if slices else 1,
        slices=tuple(slices),
        cpus=1.0,
        memory_mb=1024,
        started_at=NOW - timedelta(minutes=minutes),
        ends_at=NOW + timedelta(minutes=ends_in),
        **kw,
    )


def test_thesis_request_overtakes_an_older_hobby_request():
    snapshot = Snapshot((node(1),), (mig(1),), (request(1, tier=3, minutes_ago=30), request(2, 1)))
    result = plan(snapshot, NOW)
    assert [p.session_id for p in result.placements] == [2]
    assert [(q.session_id, q.position) for q in result.queue] == [(1, 1)]
    assert result.queue[0].reason == Reason(
        Code.WAITING, {"tier": "hobby", "ahead": 0, "higher": 0, "gpu_count": 1, "memory_mb": 4000}
    )


def test_the_smallest_slice_that_fits_is_taken():
    snapshot = Snapshot((node(1),), (mig(1, memory=40192), mig(2, memory=9984)), (request(1, 2),))
    assert plan(snapshot, NOW).placements[0].slice_ids == (2,)


def test_unhealthy_nodes_and_too_small_slices_get_nothing():
    snapshot = Snapshot(
        (node(1, healthy=False), node(2)),
        (mig(1, node_id=1), mig(2, node_id=2, memory=2048)),
        (request(1, 2),),
    )
    result = plan(snapshot, NOW)
    assert result.placements == []
    assert result.queue[0].position == 1


def test_multi_gpu_requests_get_distinct_gpus_on_one_node_or_nothing():
    slices = (mig(1, gpu_id=1), mig(2, gpu_id=1), mig(3, gpu_id=2))
    two = request(1, 1, gpu_count=2)
    result = plan(Snapshot((node(1),), slices, (two,)), NOW)
    assert result.placements[0].slice_ids in {(1, 3), (2, 3)}
    three = request(2, 1, gpu_count=3)
    assert plan(Snapshot((node(1),), slices, (three,)), NOW).placements == []


def test_cpu_only_requests_need_node_headroom_not_slices():
    snapshot = Snapshot(
        (node(1, cpus=0.5), node(2, cpus=8)),
        (),
        (request(1, 3, gpu_count=0, allowed_kinds=(), cpus=1.0),),
    )
    placement = plan(snapshot, NOW).placements[0]
    assert (placement.node_id, placement.slice_ids) == (2, ())


def test_positions_count_every_tier_ahead():
    queue = (request(1, 3, 5), request(2, 2, 4), request(3, 2, 3), request(4, 1, 1))
    busy = running(50, tier=1, slices=(mig(9),))
    result = plan(Snapshot((node(1),), (), queue, running=(busy,)), NOW)
    assert [(q.session_id, q.position) for q in result.queue] == [(4, 1), (2, 2), (3, 3), (1, 4)]
    assert [q.reason.code for q in result.queue] == [Code.WAITING] * 4
    assert [
        (q.reason.params["tier"], q.reason.params["ahead"], q.reason.params["higher"])
        for q in result.queue
    ] == [("thesis", 0, 0), ("coursework", 0, 1), ("coursework", 1, 1), ("hobby", 0, 3)]


def test_within_a_tier_less_recent_usage_goes_first_and_waiting_makes_up_for_it():
    policy = Policy(aging_s_per_gpu_hour=15 * 60)
    heavy_user = request(1, 2, minutes_ago=10, usage_gpu_hours=2.0)  # 2 h = 30 min of waiting
    light_user = request(2, 2, minutes_ago=5)
    result = plan(Snapshot((node(1),), (mig(1),), (heavy_user, light_user), policy=policy), NOW)
    assert [p.session_id for p in result.placements] == [2]
    patient = request(1, 2, minutes_ago=40, usage_gpu_hours=2.0)
    result = plan(Snapshot((node(1),), (mig(1),), (patient, light_user), policy=policy), NOW)
    assert [p.session_id for p in result.placements] == [1]


def test_a_hot_gpu_gets_no_new_work_and_the_reason_says_so():
    hot = mig(1, temperature_c=88.0)
    result = plan(Snapshot((node(1),), (hot,), (request(1, 2),)), NOW)
    assert result.placements == []
    assert result.queue[0].reason.code == Code.WAITING_HOT
    assert result.queue[0].reason.params["limit_c"] == 85.0
    cooler = mig(2, gpu_id=2, temperature_c=70.0)
    result = plan(Snapshot((node(1),), (hot, cooler), (request(1, 2),)), NOW)
    assert result.placements[0].slice_ids == (2,)


def test_warmer_gpus_and_racks_near_their_budget_are_avoided_when_there_is_a_choice():
    slices = (mig(1, node_id=1, gpu_id=1, temperature_c=80.0), mig(2, node_id=2, gpu_id=2))
    result = plan(Snapshot((node(1), node(2)), slices, (request(1, 2),)), NOW)
    assert result.placements[0].slice_ids == (2,)
    racks = (Rack("r1", 10_000, 1_000), Rack("r2", 10_000, 9_500))
    nodes = (replace(node(1), rack="r2"), replace(node(2), rack="r1"))
    slices = (mig(1, node_id=1, gpu_id=1, power_w=100), mig(2, node_id=2, gpu_id=2, power_w=100))
    result = plan(Snapshot(nodes, slices, (request(1, 2),), racks=racks), NOW)
    assert result.placements[0].node_id == 2


def test_a_rack_without_power_headroom_takes_no_more_gpu_work():
    nodes = (replace(node(1), rack="r1"),)
    slices = (mig(1, power_w=400),)
    result = plan(Snapshot(nodes, slices, (request(1, 2),), racks=(Rack("r1", 1000, 700),)), NOW)
    assert result.placements == []


def test_multi_gpu_prefers_nvlink_peers_and_may_span_one_network_plane():
    links = frozenset({(1, 2), (3, 4)})
    n1 = replace(node(1), nvlink=links)
    slices = (whole(1, 1, 1), whole(2, 1, 3), whole(3, 1, 4), whole(4, 1, 2))
    two = request(1, 1, gpu_count=2, allowed_kinds=("whole",), gpu_memory_min_mb=40000)
    placement = plan(Snapshot((n1,), slices[:3], (two,)), NOW).placements[0]
    assert set(placement.slice_ids) == {2, 3}  # GPUs 3 and 4 are peers; 1 has none free
    nodes = (replace(node(1), network_plane="ib0"), replace(node(2), network_plane="ib0"),
             replace(node(3), network_plane="eth"))  # fmt: skip
    slices = (whole(1, 1, 1), whole(2, 2, 2), whole(3, 3, 3))
    three = replace(two, gpu_count=3)
    assert plan(Snapshot(nodes, slices, (three,)), NOW).placements == []
    spread = plan(Snapshot(nodes, slices, (replace(three, multi_node=True),)), NOW)
    assert spread.placements == []  # only two GPUs on plane ib0: all or nothing
    pair = replace(two, multi_node=True)
    placement = plan(Snapshot(nodes, slices, (pair,)), NOW).placements[0]
    assert {placement.node_id, *(n for n, _ in placement.others)} == {1, 2}


def test_quotas_block_with_a_reason_at_submit_and_at_placement():
    quotas = (
        Quota("user", "ada", max_sessions=1, sessions=1),
        Quota("course", "cs101", max_gpu_hours_week=40, gpu_hours_week=40.5),
        Quota("department", "*", max_slice_memory_mb=10000),
    )
    index = index_quotas(quotas)
    assert quota_block(request(1, 2, user="ada"), index) == Reason(
        Code.QUOTA_SESSIONS, {"scope": "user", "key": "ada", "limit": 1}
    )
    assert quota_block(request(1, 2, user="ada"), index, starting=False) is None
    assert quota_block(request(1, 2, user="ben", course="cs101"), index) == Reason(
        Code.QUOTA_GPU_HOURS, {"scope": "course", "key": "cs101", "limit": 40.0, "used": 40.5}
    )
    big = request(1, 2, user="ben", department="physics", gpu_memory_min_mb=20000)
    assert quota_block(big, index) == Reason(
        Code.QUOTA_SLICE_MEMORY,
        {"scope": "department", "key": "physics", "limit_mb": 10000, "need_mb": 20000},
    )
    assert quota_block(request(1, 2, user="ben", department="physics"), index) is None
    result = plan(Snapshot((node(1),), (mig(1),), (request(1, 2, user="ada"),), quotas=quotas), NOW)
    assert result.placements == [] and result.queue[0].blocked
    assert (result.queue[0].position, result.queue[0].eta) == (0, None)
    assert result.queue[0].reason.code == Code.QUOTA_SESSIONS


def test_admission_refuses_hobby_above_the_block_threshold_and_alerts_above_warning():
    policy = Policy(warn_utilisation=0.8, block_utilisation=0.9)
    assert admission_block(3, 0.92, policy) == Reason(
        Code.POOL_BLOCK, {"utilisation": 0.92, "limit": 0.9}
    )
    assert admission_block(3, 2 / 3 + 0.3, policy).params["utilisation"] == 0.9667
    assert admission_block(2, 0.99, policy) is None and admission_block(1, 0.99, policy) is None
    # So the portal reads the pool's utilisation for hobby requests only.
    assert [admission_may_block(tier) for tier in (1, 2, 3)] == [False, False, True]
    assert admission_block(3, 0.85, policy) is None
    warn = alert_for(0.85, policy)
    assert warn.level == "warn"
    assert warn.reason == Reason(Code.POOL_WARN, {"utilisation": 0.85, "limit": 0.8})
    assert alert_for(0.95, policy).level == "block"
    assert alert_for(0.95, policy).reason.code == Code.POOL_BLOCKED
    assert alert_for(0.95, policy).reason.params["limit"] == 0.9
    assert alert_for(0.5, policy).reason == Reason(Code.POOL_OK, {"utilisation": 0.5})
    busy = [running(100 + i, 3, (mig(10 + i, gpu_id=10 + i),)) for i in range(9)]
    result = plan(Snapshot((node(1),), (mig(1),), (), running=tuple(busy)), NOW)
    assert result.alert.level == "block" and result.alert.utilisation == 0.9


def test_preemption_takes_hobby_first_with_least_lost_work_and_respects_protection():
    old_hobby = running(11, 3, (mig(1, gpu_id=1),), minutes=120)
    young_hobby = running(12, 3, (mig(2, gpu_id=2),), minutes=20)
    coursework = running(13, 2, (mig(3, gpu_id=3),), minutes=30)
    fresh_hobby = running(14, 3, (mig(4, gpu_id=4),), minutes=5)  # protected
    thesis_busy = (old_hobby, young_hobby, coursework, fresh_hobby)
    result = plan(Snapshot((node(1),), (), (request(1, 1),), running=thesis_busy), NOW)
    assert [p.victim_id for p in result.preemptions] == [12]
    deadline = NOW + timedelta(minutes=5)
    assert result.preemptions[0].reason == Reason(
        Code.PREEMPTED, {"for_tier": "thesis", "deadline": deadline}
    )
    assert result.queue[0].eta == deadline
    assert result.queue[0].reason.code == Code.WAITING_PREEMPTING
    assert result.queue[0].reason.params["count"] == 1
    assert result.queue[0].reason.params["deadline"] == deadline
    # Hobby requests never preempt; thesis work is never preempted.
    assert (
        plan(Snapshot((node(1),), (), (request(2, 3),), running=thesis_busy), NOW).preemptions == []
    )
    thesis = running(15, 1, (mig(5),), minutes=120)
    assert (
        plan(Snapshot((node(1),), (), (request(3, 0),), running=(thesis,)), NOW).preemptions == []
    )
    # While its victims' grace runs, the request does not preempt again.
    pending = replace(young_hobby, preempted_for=1, ends_at=NOW + timedelta(minutes=3))
    again = plan(Snapshot((node(1),), (), (request(1, 1),), running=(old_hobby, pending)), NOW)
    assert again.preemptions == [] and again.queue[0].eta == NOW + timedelta(minutes=3)
    assert again.queue[0].reason.code == Code.WAITING_VICTIMS
    assert again.queue[0].reason.params["count"] == 1
    assert again.queue[0].reason.params["deadline"] == NOW + timedelta(minutes=3)


def test_a_booking_holds_its_seats_and_lets_short_requests_backfill():
    shape = request(0, 2)
    booking = Booking(7, "cs101", 2, NOW + timedelta(hours=1), NOW + timedelta(hours=3), shape)
    slices = (mig(1, gpu_id=1), mig(2, gpu_id=2), mig(3, gpu_id=3))
    long_ones = (request(1, 1, duration_s=4 * 3600), request(2, 1, duration_s=4 * 3600))
    result = plan(Snapshot((node(1),), slices, long_ones, bookings=(booking,)), NOW)
    assert [p.session_id for p in result.placements] == [1]
    assert result.queue[0].reason.code == Code.WAITING_HELD
    assert result.queue[0].reason.params["tier"] == "thesis"
    short = request(3, 3, duration_s=30 * 60)
    result = plan(Snapshot((node(1),), slices, (*long_ones, short), bookings=(booking,)), NOW)
    assert sorted(p.session_id for p in result.placements) == [1, 3]
    # In its window, the class's own requests come first, ahead of thesis.
    during = NOW + timedelta(hours=1, minutes=5)
    seat = request(4, 2, booking_id=7)
    result = plan(
        Snapshot((node(1),), slices[:1], (long_ones[0], seat), bookings=(booking,)), during
    )
    assert [p.session_id for p in result.placements] == [4]


def test_estimated_starts_follow_running_ends_and_the_queue_ahead():
    busy = (
        running(11, 2, (mig(1, gpu_id=1),), ends_in=30),
        running(12, 2, (mig(2, gpu_id=2),), ends_in=90),
    )
    queue = (request(1, 2, 3, duration_s=3600), request(2, 2, 2, duration_s=3600), request(3, 2, 1))
    result = plan(Snapshot((node(1),), (), queue, running=busy), NOW)
    etas = {q.session_id: q.eta for q in result.queue}
    assert etas[1] == NOW + timedelta(minutes=30)
    assert etas[2] == NOW + timedelta(minutes=90)
    assert etas[3] == NOW + timedelta(minutes=90)  # slice 1 again, after request 1's hour
    nothing_fits = request(4, 2, gpu_memory_min_mb=200_000)
    result = plan(Snapshot((node(1),), (), (nothing_fits,), running=busy), NOW)
    assert result.queue[0].eta is None
    assert result.queue[0].reason == Reason(
        Code.NO_FIT,
        {
            "gpu_count": 1,
            "memory_mb": 200_000,
            "kinds": ["mig", "share"],
            "models": [],
            "cpus": 1.0,
            "ram_mb": 1024,
        },
    )


def test_a_booking_counts_slices_freed_before_it_starts_and_holds_the_tightest_free_ones():
    """Found by the campus simulator: a lab far ahead held a whole A100 for an 8 GB seat."""
    a100 = "NVIDIA A100-SXM4-80GB"
    whole_gpu = FreeSlice(1, 1, 10, "whole", 81920, a100, 1000)
    small = FreeSlice(2, 1, 11, "mig", 9984, a100, 142)
    busy = RunningSession(9, 2, 1, (small,), 2, 8192, NOW - timedelta(hours=1),
                          NOW + timedelta(minutes=10))  # fmt: skip
    seat = QueuedRequest(0, 2, NOW, 1, 8192, ("mig", "whole"), 2, 8192)
    lab = Booking(1, "lab", 1, NOW + timedelta(hours=5), NOW + timedelta(hours=7), seat)
    thesis = QueuedRequest(5, 1, NOW, 1, 81920, ("whole",), 8, 65536, duration_s=6 * 3600)
    snap = Snapshot((node(1),), (whole_gpu,), (thesis,), running=(busy,), bookings=(lab,))
    assert [p.slice_ids for p in plan(snap, NOW).placements] == [(1,)]
    # With nothing freeing in time, the seat holds the smallest free slice, not the whole GPU.
    free_small = replace(small, slice_id=3, gpu_id=12)
    snap = Snapshot((node(1),), (whole_gpu, free_small), (thesis,), bookings=(lab,))
    assert [p.slice_ids for p in plan(snap, NOW).placements] == [(1,)]
    snap = Snapshot((node(1),), (whole_gpu,), (thesis,), bookings=(lab,))
    assert plan(snap, NOW).placements == []


def test_a_cpu_only_request_avoids_stranding_idle_gpus_where_fragmentation_ties():
    """Workload: half 1 GPU + 1 CPU, half 1 GPU + 15 CPUs, so 8 CPUs per GPU of demand.

    On n1 (16 CPUs, 2 idle GPUs) one more CPU leaves 15 CPUs: still enough for either
    shape (FGD's fragmentation is 0 before and after on both nodes), but less than the
    2 x 8 CPUs its idle GPUs would need. n2 (40 CPUs) strands nothing, so it wins even
    though n1 comes first in the node order.
    """
    shapes = (TargetShape(1000, 1000, 1, None, 0.5), TargetShape(15000, 1000, 1, None, 0.5))
    nodes = (node(1, cpus=16), node(2, cpus=40))
    free = (whole(1, 1, 1), whole(2, 1, 2), whole(3, 2, 1), whole(4, 2, 2))
    cpu_only = request(1, 2, gpu_count=0, allowed_kinds=(), cpus=1.0)
    result = plan(Snapshot(nodes, free, (cpu_only,), workload=shapes), NOW)
    assert [(p.session_id, p.node_id) for p in result.placements] == [(1, 2)]
    # Without CPU-hungry GPU work in the mix there is nothing to strand: node order decides.
    light = (TargetShape(1000, 1000, 1, None, 1.0),)
    result = plan(Snapshot(nodes, free, (cpu_only,), workload=light), NOW)
    assert [(p.session_id, p.node_id) for p in result.placements] == [(1, 1)]


def test_gpus_that_constrained_demand_needs_are_kept_for_it():
    """A fifth of the GPU demand can only run on the T4s (a quarter of the pool), 3/10 only on
    the A100s (three quarters): the T4s are under twice the pressure. FGD alone would put an
    unconstrained request on the T4 node (it strands less of the A100-only demand there);
    the pressure term keeps the T4s for the work that has nowhere else to go."""
    t4 = [FreeSlice(10 + g, 1, g, "whole", 15360, "T4") for g in range(2)]
    a100 = [whole(20 + g, 2, g) for g in range(6)]
    shapes = (
        TargetShape(1000, 1000, 1, frozenset({"A100"}), 0.3),
        TargetShape(1000, 1000, 1, frozenset({"T4"}), 0.2),
        TargetShape(1000, 1000, 1, None, 0.5),
    )
    anywhere = request(1, 2, allowed_kinds=("whole",))
    result = plan(Snapshot((node(1), node(2)), (*t4, *a100), (anywhere,), workload=shapes), NOW)
    assert [p.node_id for p in result.placements] == [2]


def test_workload_mix_figures():
    mix = WorkloadMix()
    mix.add(4000, 1000, None)
    mix.add(12000, 1000, frozenset({"T4", "P100"}))
    mix.add(500, 0, frozenset({"T4"}))  # CPU-only work has no GPU to strand or constrain
    assert mix.cpu_per_gpu() == 8000
    # Half of the GPU demand must go to T4 or P100, which are 1/8 of the capacity together.
    pressure = mix.pressure({"A100": 7000.0, "T4": 500.0, "P100": 500.0})
    assert pressure == {"A100": 0.0, "T4": 4.0, "P100": 4.0}
    assert strand_growth(2000, 0, 16000, 15000, 8000) == 125
    assert strand_growth(2000, 0, 40000, 39000, 8000) == 0
    assert strand_growth(2000, 1000, 16000, 15000, 0) == 0  # unknown ratio: no stranding


def test_the_plan_returns_the_holds_still_standing_and_notes_seats_that_do_not_fit():
    shape = request(0, 2)
    soon = Booking(7, "cs101", 2, NOW + timedelta(hours=1), NOW + timedelta(hours=3), shape)
    slices = (mig(1, gpu_id=1), mig(2, gpu_id=2))
    result = plan(Snapshot((node(1),), slices, (), bookings=(soon,)), NOW)
    assert result.holds == [BookingHold(7, 1, (1,), 1.0, 1024), BookingHold(7, 1, (2,), 1.0, 1024)]
    assert result.notes == []
    # A request that ends before the class starts backfills a hold: one is left standing.
    short = request(3, 3, duration_s=30 * 60)
    result = plan(Snapshot((node(1),), slices, (short,), bookings=(soon,)), NOW)
    assert [p.slice_ids for p in result.placements] == [(1,)]
    assert result.holds == [BookingHold(7, 1, (2,), 1.0, 1024)]
    # In the window, a seat of the class takes its booking's hold.
    during = NOW + timedelta(hours=1, minutes=5)
    seat = request(4, 2, booking_id=7)
    result = plan(Snapshot((node(1),), slices, (seat,), bookings=(soon,)), during)
    assert [p.slice_ids for p in result.placements] == [(1,)]
    assert result.holds == [BookingHold(7, 1, (2,), 1.0, 1024)]
    # Seats beyond the pool are a note; holds come by booking start, then booking id.
    later = Booking(3, "art", 3, NOW + timedelta(hours=2), NOW + timedelta(hours=4), shape)
    three = (*slices, mig(5, gpu_id=5), mig(6, gpu_id=6))
    result = plan(Snapshot((node(1),), three, (), bookings=(later, soon)), NOW)
    assert [(h.booking_id, h.slice_ids) for h in result.holds] == [
        (7, (1,)),
        (7, (2,)),
        (3, (5,)),
        (3, (6,)),
    ]
    assert result.notes == [
        Reason(Code.BOOKING_SHORT, {"booking": 3, "course": "art", "held": 2, "need": 3})
    ]


def test_gpus_of_one_node_with_and_without_a_reported_temperature():
    """A node whose agent reports a temperature for some GPUs and none for others."""
    slices = (mig(1, gpu_id=1, temperature_c=70.0), mig(2, gpu_id=2))
    result = plan(Snapshot((node(1),), slices, (request(1, 2),)), NOW)
    assert [p.slice_ids for p in result.placements] == [(2,)]  # the cooler one (not reported)
