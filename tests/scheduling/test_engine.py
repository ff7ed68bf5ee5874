"""The engine is a pure function of snapshot and clock: tested without a database."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from scheduling.engine import FreeSlice, NodeState, QueuedRequest, Snapshot, plan

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


def mig(slice_id: int, node_id: int = 1, gpu_id: int = 1, memory: int = 9984) -> FreeSlice:
    return FreeSlice(slice_id, node_id, gpu_id, "mig", memory, "A100")


def test_thesis_request_overtakes_an_older_hobby_request():
    snapshot = Snapshot((node(1),), (mig(1),), (request(1, tier=3, minutes_ago=30), request(2, 1)))
    result = plan(snapshot, NOW)
    assert [p.session_id for p in result.placements] == [2]
    assert [(q.session_id, q.position) for q in result.queue] == [(1, 1)]
    assert "in hobby" in result.queue[0].reason


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
    result = plan(Snapshot((node(1),), (), queue), NOW)
    assert [(q.session_id, q.position) for q in result.queue] == [(4, 1), (2, 2), (3, 3), (1, 4)]
    assert result.queue[2].reason == (
        "waiting for a free slice: 1 ahead of you in coursework, 1 in higher tiers"
    )
