"""Homes kept on one node (issue 27): a request goes to a node that keeps its person's home
when one can take it, else where it would have gone, and the placement says which."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from scheduling.engine import (
    Booking,
    Code,
    FreeSlice,
    NodeState,
    QueuedRequest,
    Reason,
    RunningSession,
    Snapshot,
    plan,
)

from .test_engine_properties import PROPS, _fits, _order_key, snapshots

NOW = datetime(2026, 12, 2, 9, 58, tzinfo=UTC)


def node(node_id: int, healthy: bool = True, cpus: float = 64) -> NodeState:
    return NodeState(node_id, f"n{node_id}", healthy, cpus, 262144)


def mig(slice_id: int, node_id: int, gpu_id: int) -> FreeSlice:
    return FreeSlice(slice_id, node_id, gpu_id, "mig", 9984, "A100", milli=143)


def request(session_id: int, **overrides) -> QueuedRequest:
    fields = dict(
        session_id=session_id,
        tier=3,
        submitted_at=NOW - timedelta(minutes=session_id),
        gpu_count=1,
        gpu_memory_min_mb=4000,
        allowed_kinds=("mig",),
        cpus=1.0,
        memory_mb=1024,
    )
    fields.update(overrides)
    return QueuedRequest(**fields)


def busy_gpu(node_id: int, gpu_id: int, free: int, first_id: int):
    """A GPU of seven MIG slices with ``free`` of them free, the rest held by someone."""
    slices = [mig(first_id + i, node_id, gpu_id) for i in range(7)]
    held = RunningSession(
        session_id=900 + gpu_id,
        tier=3,
        node_id=node_id,
        slices=tuple(slices[free:]),
        cpus=1.0,
        memory_mb=1024,
        started_at=NOW - timedelta(hours=1),
        ends_at=NOW + timedelta(hours=3),
    )
    return tuple(slices[:free]), held


def two_nodes(**node_2) -> Snapshot:
    """Node 1: a GPU with one MIG slice left (packing there scores best). Node 2: a GPU
    with every slice free, the home in these tests."""
    packed, held = busy_gpu(1, 1, free=1, first_id=1)
    empty, _ = busy_gpu(2, 2, free=7, first_id=11)
    return Snapshot((node(1), node(2, **node_2)), packed + empty, (), running=(held,))


def placed(snapshot: Snapshot, *queue: QueuedRequest) -> dict[int, tuple[int, Reason | None]]:
    result = plan(replace(snapshot, queue=queue), NOW)
    return {p.session_id: (p.node_id, p.reason) for p in result.placements}


def test_without_a_home_the_packed_node_wins():
    # The control of the tests below: node 1 is the better place on its own.
    assert placed(two_nodes(), request(1)) == {1: (1, None)}


def test_a_request_goes_to_its_home_node_over_a_better_scored_one():
    assert placed(two_nodes(), request(1, home_nodes=(2,))) == {
        1: (2, Reason(Code.PLACED_HOME, {"node": "n2"}))
    }


def test_a_home_node_without_room_sends_it_where_it_would_have_gone():
    full = two_nodes(cpus=0.5)  # node 2's GPU is free, its CPUs are not

    assert placed(full, request(1, home_nodes=(2,))) == {
        1: (1, Reason(Code.PLACED_AWAY, {"node": "n1", "home": "n2"}))
    }


def test_an_unhealthy_home_node_is_not_used():
    sick = two_nodes(healthy=False)

    assert placed(sick, request(1, home_nodes=(2,))) == {
        1: (1, Reason(Code.PLACED_AWAY, {"node": "n1", "home": "n2"}))
    }


def test_home_nodes_are_tried_in_their_order():
    snapshot = two_nodes()
    snapshot = replace(
        snapshot,
        nodes=(*snapshot.nodes, node(3, cpus=0.0)),
        free_slices=(*snapshot.free_slices, mig(30, 3, 3)),
    )

    # Node 3 (no CPU left) cannot take it, node 2 can: node 2, and the reason says "home".
    assert placed(snapshot, request(1, home_nodes=(3, 2))) == {
        1: (2, Reason(Code.PLACED_HOME, {"node": "n2"}))
    }
    # The home named first wins when both fit.
    assert placed(snapshot, request(1, home_nodes=(1, 2)))[1][0] == 1


def test_a_home_in_the_queue_does_not_move_others_of_the_same_shape():
    # The shape's cached scores are shared by both requests; the home is only one person's.
    at_home, plain = request(1, home_nodes=(2,)), request(2)
    for queue in ((at_home, plain), (plain, at_home)):
        got = placed(two_nodes(), *queue)
        assert (got[1][0], got[2][0]) == (2, 1)
        assert got[2][1] is None


def test_nothing_fits_anywhere_so_it_waits_with_its_usual_reason():
    snapshot = replace(two_nodes(), free_slices=())
    result = plan(replace(snapshot, queue=(request(1, home_nodes=(2,)),)), NOW)
    assert result.placements == []
    assert result.queue[0].reason.code == Code.WAITING


def test_a_booked_request_takes_its_bookings_hold_on_its_home_node():
    # Two seats held on identical nodes: the first hold is on node 1 (the lower id).
    snapshot = Snapshot((node(1), node(2)), (mig(1, 1, 1), mig(2, 2, 2)), ())
    seat = request(0, tier=2, booking_id=7)
    booking = Booking(7, "cs101", 2, NOW - timedelta(minutes=5), NOW + timedelta(hours=2), seat)
    snapshot = replace(snapshot, bookings=(booking,))

    assert placed(snapshot, request(1, tier=2, booking_id=7))[1][0] == 1  # the control
    assert placed(snapshot, request(1, tier=2, booking_id=7, home_nodes=(2,))) == {
        1: (2, Reason(Code.PLACED_HOME, {"node": "n2"}))
    }


@PROPS
@given(snapshots(), st.data())
def test_a_request_goes_home_whenever_its_home_can_take_it(snapshot, data):
    """With random home nodes on every request: placements stay feasible and never share a
    slice, no waiting request fits what those ahead left, and each placed request is on a
    home node exactly when one of them could take it (an independent fit check)."""
    ids = [n.node_id for n in snapshot.nodes]
    homes = st.lists(st.sampled_from(ids), max_size=2, unique=True).map(tuple)
    queue = tuple(replace(r, home_nodes=data.draw(homes)) for r in snapshot.queue)
    snapshot = replace(snapshot, queue=queue)
    result = plan(snapshot, NOW)

    given_out = [sid for p in result.placements for sid in p.slice_ids]
    assert len(given_out) == len(set(given_out)), "a slice was given twice"
    by_id = {p.session_id: p for p in result.placements}
    nodes = {n.node_id: n for n in snapshot.nodes}
    cpus = {n.node_id: n.cpus_free for n in snapshot.nodes}
    memory = {n.node_id: n.memory_free_mb for n in snapshot.nodes}
    free = list(snapshot.free_slices)
    used: Counter[int] = Counter()
    for r in sorted(snapshot.queue, key=_order_key):
        fitting = [
            node_id
            for node_id in ids
            if _fits(
                r,
                nodes[node_id],
                cpus[node_id],
                memory[node_id],
                [s for s in free if s.node_id == node_id],
            )
        ]
        p = by_id.get(r.session_id)
        if p is None:
            assert not fitting, f"request {r.session_id} waits but fits"
            continue
        home_fits = [node_id for node_id in r.home_nodes if node_id in fitting]
        if home_fits:
            assert p.node_id == home_fits[0]
            assert p.reason == Reason(Code.PLACED_HOME, {"node": f"n{p.node_id}"})
        elif r.home_nodes:
            assert p.reason is not None and p.reason.code == Code.PLACED_AWAY
        else:
            assert p.reason is None
        cpus[p.node_id] -= r.cpus
        memory[p.node_id] -= r.memory_mb
        used[p.node_id] += 1
        free = [s for s in free if s.slice_id not in p.slice_ids]
    for node_id in used:
        assert cpus[node_id] >= -1e-9 and memory[node_id] >= 0
