"""The deskpool policy (scheduling.sim) and its scores (scheduling.engine.scoring)."""

from __future__ import annotations

import csv
import random

from scheduling.engine.scoring import FragmentationModel, TargetShape, score_placement
from scheduling.sim import Cluster, FGDPolicy, Node, make_policy, typical_pods
from scheduling.sim.policies import DeskpoolPolicy
from scheduling.sim.runner import run_openb, simulate
from scheduling.sim.trace import load_nodes, load_pods, make_pod
from scheduling.sim.workload import TypicalPod

from .test_sim import _replay, _write_synthetic


def test_deskpool_placements_are_feasible(tmp_path):
    pods, nodes = _write_synthetic(tmp_path, n_nodes=16, n_pods=120)
    out = tmp_path / "out"
    run_openb(str(pods), str(nodes), ["deskpool"], [1, 2, 3], str(out), 1)
    node_list = load_nodes(nodes)
    for seed in (1, 2, 3):
        with open(out / f"deskpool-{seed}.csv", newline="") as f:
            rows = list(csv.DictReader(f))
        assert _replay(rows, node_list) > 0


def test_deskpool_is_deterministic_per_seed(tmp_path):
    pods, nodes = _write_synthetic(tmp_path)
    trace, node_list = load_pods(pods), load_nodes(nodes)
    typical = typical_pods(trace)
    a = simulate(trace, node_list, "deskpool", 5, typical)
    b = simulate(trace, node_list, "deskpool", 5, typical)
    c = simulate(trace, node_list, "deskpool", 6, typical)
    assert a[1] == b[1] and a[0]["unallocated_pct_at_100"] == b[0]["unallocated_pct_at_100"]
    assert a[1] != c[1]


def test_fractional_pod_takes_the_tightest_of_equally_good_gpus():
    frag = FragmentationModel([TargetShape(0, 200, 1, None, 1.0)])
    # 100-milli pod: 900 and 600 both stay >= 200 (no fragment either way): tightest is 600.
    score, value = score_placement(frag, "T4", 8000, (600, 900, 1000), 0, 1, 100)
    assert value == 600


def _two_nodes_one_used():
    # Node 0 (first in the tie order) is fully free; node 1 has one GPU with 600 left.
    cluster = Cluster([Node("free", 64000, 262144, 8, "T4"), Node("used", 64000, 262144, 8, "T4")])
    cluster.place(1, make_pod("old", 0, 0, 1, 400), (0,))
    return cluster


def test_deskpool_keeps_a_whole_node_free_for_a_later_8_gpu_pod_where_fgd_does_not():
    # Target workload: only 500-milli pods (the rare 8-GPU shape is outside the 95% cut).
    typical = [TypicalPod(0, 500, 1, "", 1.0)]
    small, big = make_pod("s", 1000, 1024, 1, 300), make_pod("b", 8000, 1024, 8, 1000)

    # FGD: a free GPU on either node scores int(100*sigmoid(0)) = 50 (the 600 GPU would drop to
    # 300 < 500: 42), so the tie goes to node 0 and breaks the only fully free node.
    cluster = _two_nodes_one_used()
    fgd = FGDPolicy(typical)
    fgd.reset(cluster, random.Random(0))
    j, gpus = fgd.choose(small, cluster)
    assert j == 0
    cluster.place(j, small, gpus)
    assert fgd.choose(big, cluster) is None

    # deskpool: same primary score, but breaking a fully free node costs more than opening a
    # free GPU on a used node, so the small pod goes to node 1 and the 8-GPU pod fits on node 0.
    cluster = _two_nodes_one_used()
    desk = make_policy("deskpool", typical)
    assert isinstance(desk, DeskpoolPolicy)
    desk.reset(cluster, random.Random(0))
    j, gpus = desk.choose(small, cluster)
    assert j == 1 and gpus != (0,)
    cluster.place(j, small, gpus)
    assert desk.choose(big, cluster) == (0, tuple(range(8)))


def test_deskpool_learns_the_demand_from_arrivals_only():
    """CPU per GPU and model pressure come from the pods that have arrived, refreshed at 64."""
    nodes = [Node("a", 64000, 262144, 4, "A"), Node("t", 64000, 262144, 4, "T4")]
    cluster = Cluster(nodes)
    policy = DeskpoolPolicy([TypicalPod(4000, 1000, 1, "", 1.0)])
    policy.reset(cluster, random.Random(1))
    light = make_pod("light", 2000, 1024, 1, 500, "")  # 4 CPUs per GPU
    pinned = make_pod("pinned", 6000, 1024, 1, 500, "T4")  # 12 CPUs per GPU, only on T4
    for i in range(63):
        policy.choose(light if i % 2 else pinned, cluster)
    assert policy.cpu_per_gpu == 0.0 and policy.pressure == {}  # nothing learned before 64
    policy.choose(light, cluster)  # the 64th arrival: 32 light + 32 pinned
    assert policy.cpu_per_gpu == 8000.0
    # Half the GPU demand can only go to the T4s, half the capacity: pressure 1 there.
    assert policy.pressure == {"A": 0.0, "T4": 1.0}
