"""Issue 38: whole NVLink GPUs are kept for work that needs them while a fitting slice is free.

Engine-level, pure: a node of four NVLink-joined whole A100s and a node whose A100 is split
into free MIG 1g.10gb and 2g.20gb instances. A small hobby profile allowing every kind goes
to the tightest MIG instance, and a thesis pair queued behind still finds its NVLink pair.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from scheduling.engine import FreeSlice, NodeState, QueuedRequest, Snapshot, plan

NOW = datetime(2026, 12, 6, 10, 0, tzinfo=UTC)
LINKS = frozenset({(1, 2), (1, 3), (1, 4), (2, 3), (2, 4), (3, 4)})


def whole(slice_id: int, node_id: int, gpu_id: int) -> FreeSlice:
    return FreeSlice(slice_id, node_id, gpu_id, "whole", 81920, "A100", 1000, 7.0)


def mig(slice_id: int, gpu_id: int, profile: str) -> FreeSlice:
    milli, memory, cu = {"1g": (142, 9984, 1.0), "2g": (285, 19968, 2.0)}[profile]
    return FreeSlice(slice_id, 2, gpu_id, "mig", memory, "A100", milli, cu)


def request(session_id: int, tier: int, minutes_ago: int = 0, **kw: Any) -> QueuedRequest:
    base = QueuedRequest(
        session_id=session_id,
        tier=tier,
        submitted_at=NOW - timedelta(minutes=minutes_ago),
        gpu_count=1,
        gpu_memory_min_mb=8000,
        allowed_kinds=("mig", "share", "whole"),
        cpus=2.0,
        memory_mb=4096,
    )
    return replace(base, **kw)


def nodes(nvlink: bool = True) -> tuple[NodeState, ...]:
    thesis = NodeState(1, "a100-nvl", True, 64, 262144, nvlink=LINKS if nvlink else frozenset())
    return (thesis, NodeState(2, "a100-mig", True, 64, 262144))


WHOLES = tuple(whole(i, 1, i) for i in range(1, 5))
# GPU 10 split into 3 x 1g.10gb + 2 x 2g.20gb, all free (the walk's case: a free partitioned
# A100, which a small slice would "break", next to free whole GPUs).
MIGS = tuple(mig(i, 10, "1g" if i < 14 else "2g") for i in range(11, 16))
HOBBY = request(1, tier=3)


def placed(snapshot: Snapshot) -> dict[int, tuple[int, ...]]:
    result = plan(snapshot, NOW)
    return {p.session_id: tuple(p.slice_ids) for p in result.placements}


def test_small_hobby_profile_takes_the_free_mig_slice_not_a_whole_nvlink_a100():
    assert placed(Snapshot(nodes(), WHOLES + MIGS, (HOBBY,))) == {1: (11,)}
    # A used MIG GPU beside it: its tightest instance.
    used = (*MIGS, mig(16, 11, "1g"))
    assert placed(Snapshot(nodes(), WHOLES + used, (HOBBY,))) == {1: (16,)}


def test_without_nvlink_a_whole_gpu_still_loses_to_a_fitting_free_slice():
    got = placed(Snapshot(nodes(nvlink=False), WHOLES + MIGS, (HOBBY,)))
    assert got[1] == (11,)


def test_a_whole_gpu_is_taken_when_no_fitting_slice_is_free():
    big = replace(HOBBY, gpu_memory_min_mb=30000)  # fits no 1g/2g instance
    assert placed(Snapshot(nodes(), WHOLES + MIGS, (big,)))[1][0] in {1, 2, 3, 4}
    assert placed(Snapshot(nodes(), WHOLES, (HOBBY,)))[1][0] in {1, 2, 3, 4}
    # Only whole GPUs free: one with no free NVLink peer goes first.
    lone = NodeState(3, "a100-pcie", True, 64, 262144)
    wholes = (*WHOLES, whole(5, 3, 5))
    assert placed(Snapshot((*nodes(), lone), wholes, (HOBBY,))) == {1: (5,)}


def test_a_thesis_pair_queued_behind_the_hobby_desktops_finds_its_nvlink_pair():
    hobbies = tuple(request(i, tier=3, minutes_ago=10) for i in range(1, 6))
    pair = request(9, tier=1, gpu_count=2, gpu_memory_min_mb=40000, allowed_kinds=("whole",))
    got = placed(Snapshot(nodes(), WHOLES + MIGS, (*hobbies, pair)))
    assert len(got[9]) == 2 and set(got[9]) <= {1, 2, 3, 4}
    assert sorted(got[i][0] for i in range(1, 6)) == [11, 12, 13, 14, 15]
    # Seven hobby desktops: five fill the MIG GPU, two take whole GPUs, and the pair still
    # gets two NVLink-joined GPUs of the four.
    seven = tuple(request(i, tier=3, minutes_ago=10) for i in range(1, 8))
    got = placed(Snapshot(nodes(), WHOLES + MIGS, (*seven, pair)))
    assert sum(1 for i in range(1, 8) if got[i][0] in {1, 2, 3, 4}) == 2
    assert len(got[9]) == 2 and set(got[9]) <= {1, 2, 3, 4}
