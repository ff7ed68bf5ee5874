"""The start-backlog tie-break: where fragmentation levels tie, a node with many desktops
still to start loses to one with fewer, counted from the snapshot (sessions PLACED or
STARTING there) and from the placements of the same cycle, so a class's burst of CPU-only
desktops spreads over the nodes instead of queueing in waves on one."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from scheduling.choices import SessionState
from scheduling.engine import FreeSlice, NodeState, QueuedRequest, Snapshot, plan
from scheduling.engine import placement as engine_placement
from scheduling.engine.pool import Cycle
from scheduling.models import Session
from scheduling.services.cycle import do_scheduling_cycle
from scheduling.services.lifecycle import do_transition
from scheduling.services.sessions import check_submit, do_submit
from scheduling.services.snapshot import build_snapshot

from ..conftest import give_thesis_grant, gpu_inventory
from .test_engine import NOW, node, request, whole
from .test_engine_homes import busy_gpu
from .test_engine_homes import request as mig_request


def cpu_only(session_id: int) -> QueuedRequest:
    return request(session_id, 2, gpu_count=0, allowed_kinds=(), gpu_memory_min_mb=0)


def equal_nodes(count: int, **node_fields) -> tuple[tuple[NodeState, ...], tuple[FreeSlice, ...]]:
    """``count`` nodes alike: 64 CPUs, 256 GB, one free whole GPU each."""
    nodes = tuple(replace(node(n), **node_fields) for n in range(1, count + 1))
    return nodes, tuple(whole(n, n, n) for n in range(1, count + 1))


def per_node(snapshot: Snapshot) -> Counter[int]:
    return Counter(p.node_id for p in plan(snapshot, NOW).placements)


def test_a_class_burst_of_cpu_only_desktops_spreads_over_equal_nodes():
    nodes, slices = equal_nodes(4)
    burst = tuple(cpu_only(i) for i in range(1, 41))

    placed = per_node(Snapshot(nodes, slices, burst))

    assert sum(placed.values()) == 40
    assert set(placed) == {1, 2, 3, 4}
    assert max(placed.values()) <= 40 // 4 + 3, placed


def test_without_the_backlog_term_the_burst_packs_on_the_first_node(monkeypatch):
    # The control: the fragmentation levels tie, so node order alone decides.
    monkeypatch.setattr(engine_placement, "START_WEIGHT", 0.0)
    nodes, slices = equal_nodes(4)
    burst = tuple(cpu_only(i) for i in range(1, 41))

    assert per_node(Snapshot(nodes, slices, burst)) == {1: 40}


def test_a_node_with_30_starts_pending_loses_a_tie_to_an_equal_node_without():
    nodes, slices = equal_nodes(2)
    busy = (replace(nodes[0], pending_starts=30), nodes[1])

    assert per_node(Snapshot(nodes, slices, (cpu_only(1),))) == {1: 1}  # the control
    assert per_node(Snapshot(busy, slices, (cpu_only(1),))) == {2: 1}
    # A one-GPU request too (the equal nodes share a cached score unless the backlog is
    # part of the node's signature).
    gpu = request(1, 2, allowed_kinds=("whole",))
    assert per_node(Snapshot(busy, slices, (gpu,))) == {2: 1}


def used_gpu_or_free_node(pending_on_used: int) -> Snapshot:
    """Node 1: a GPU with 3 of its 7 MIG slices held. Node 2: a GPU with every slice
    free. Both at the same fragmentation level for a one-slice request: the tie-breaks
    decide (filling a used GPU over breaking a free node)."""
    used, held = busy_gpu(1, 1, free=4, first_id=1)
    free, _ = busy_gpu(2, 2, free=7, first_id=11)
    nodes = (replace(node(1), pending_starts=pending_on_used), node(2))
    return Snapshot(nodes, used + free, (mig_request(1),), running=(held,))


@pytest.mark.parametrize("pending", [0, 9, 30, 1000])
def test_a_fractional_request_fills_a_used_gpu_over_breaking_a_free_node(pending):
    assert per_node(used_gpu_or_free_node(pending)) == {1: 1}


def test_the_cap_keeps_a_long_backlog_from_breaking_a_free_node(monkeypatch):
    # The control of the test above: uncapped, 1000 starts would outweigh the break penalty.
    monkeypatch.setattr(engine_placement, "START_CAP", 1000)

    assert per_node(used_gpu_or_free_node(1000)) == {2: 1}


def test_a_placement_adds_to_its_node_backlog_and_a_booking_hold_does_not():
    nodes, slices = equal_nodes(1, pending_starts=3)
    cycle = Cycle(Snapshot(nodes, slices, ()), NOW)

    cycle.take(1, (), 1.0, 1024, start=False)
    assert cycle.pending[1] == 3
    cycle.take(1, slices, 1.0, 1024)
    assert cycle.pending[1] == 4


# -- the snapshot --


def submitted(make_user, profile, count: int) -> list[Session]:
    sessions = []
    for n in range(count):
        person = make_user(f"backlog-{n}")
        give_thesis_grant(person)
        sessions.append(do_submit(person, check_submit(person, profile.pk, "thesis", None)))
    return sessions


@pytest.mark.django_db
def test_the_snapshot_counts_placed_and_starting_sessions_per_node_in_one_query(
    make_user, profile, register_node
):
    node_a, _ = register_node("gpu-a", [gpu_inventory("GPU-a", 0, mig_slices=4)])
    node_b, _ = register_node("gpu-b", [gpu_inventory("GPU-b", 0, mig_slices=4)])
    sessions = submitted(make_user, profile, 3)
    assert do_scheduling_cycle().placed == 3
    on = Counter(Session.objects.get(pk=s.pk).node_id for s in sessions)
    busy = max(on, key=lambda n: on[n])
    first, second, *_ = [s for s in sessions if Session.objects.get(pk=s.pk).node_id == busy]
    do_transition(first.pk, SessionState.STARTING, actor="test")
    do_transition(second.pk, SessionState.STARTING, actor="test")
    do_transition(second.pk, SessionState.RUNNING, actor="test")  # running: no longer pending

    with CaptureQueriesContext(connection) as two_nodes:
        snapshot = build_snapshot()

    pending = {n.node_id: n.pending_starts for n in snapshot.nodes}
    assert pending[busy] == on[busy] - 1
    assert sum(pending.values()) == 2
    assert {node_a.pk, node_b.pk} <= set(pending)
    # One more node, no more queries: the counts are one aggregate over the nodes.
    register_node("gpu-c", [gpu_inventory("GPU-c", 0, mig_slices=4)])
    with CaptureQueriesContext(connection) as three_nodes:
        build_snapshot()
    assert len(three_nodes) == len(two_nodes)
