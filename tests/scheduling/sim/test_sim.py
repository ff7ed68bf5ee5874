"""The trace simulator (scheduling.sim): feasibility, determinism, fragmentation, the metric."""

from __future__ import annotations

import csv
import random

import pytest

from scheduling.sim import Cluster, FGDPolicy, Node, make_policy, typical_pods
from scheduling.sim.__main__ import parse_seeds
from scheduling.sim.policies import Fragmentation
from scheduling.sim.runner import run_openb, simulate
from scheduling.sim.trace import load_nodes, load_pods, make_pod
from scheduling.sim.workload import TypicalPod

MODELS = ("T4", "V100M32", "G2")
SPECS = ("", "", "", "T4", "V100M32|G2", "G2")


def _write_synthetic(tmp_path, seed=7, n_nodes=12, n_pods=80):
    rng = random.Random(seed)
    nodes = tmp_path / "nodes.csv"
    with open(nodes, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["sn", "cpu_milli", "memory_mib", "gpu", "model"])
        for i in range(n_nodes):
            gpus = rng.choice([0, 1, 2, 4, 8])
            model = rng.choice(MODELS) if gpus else ""
            w.writerow([f"n{i:02d}", rng.choice([16000, 32000, 64000]), 65536, gpus, model])
    pods = tmp_path / "pods.csv"
    with open(pods, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec"])
        for i in range(n_pods):
            num = rng.choice([0, 1, 1, 1, 2, 4])
            milli = rng.choice([100, 250, 500, 700, 1000]) if num == 1 else (1000 if num else 0)
            w.writerow(
                [f"p{i:03d}", rng.choice([1000, 2000, 8000]), rng.choice([2048, 8192, 32768])]
                + [num, milli, rng.choice(SPECS) if num else ""]
            )
    return pods, nodes


def _replay(rows, nodes):
    """Re-check every CSV row against an independent model of the cluster."""
    by_name = {n.name: n for n in nodes}
    cpu = {n.name: n.cpu_milli for n in nodes}
    mem = {n.name: n.memory_mib for n in nodes}
    gpu = {n.name: [1000] * n.num_gpu for n in nodes}

    def fits(name, r):
        num, milli = int(r["num_gpu"]), int(r["gpu_milli"])
        if cpu[name] < int(r["cpu_milli"]) or mem[name] < int(r["memory_mib"]):
            return False
        if num == 0:
            return True
        if not gpu[name]:
            return False
        spec = r["gpu_spec"]
        if spec and by_name[name].model not in spec.split("|"):
            return False
        if num == 1 and milli < 1000:
            return max(gpu[name]) >= milli
        return gpu[name].count(1000) >= num

    placed = 0
    for r in rows:
        num, milli = int(r["num_gpu"]), int(r["gpu_milli"])
        if not r["node"]:
            assert not any(fits(n.name, r) for n in nodes), f"{r['pod']} fitted but was skipped"
            continue
        name = r["node"]
        assert fits(name, r), f"{r['pod']} does not fit on {name}"
        ids = [int(x) for x in r["gpus"].split(";")] if r["gpus"] else []
        assert len(ids) == num and len(set(ids)) == num
        for g in ids:
            assert gpu[name][g] >= milli
            if num > 1 or milli == 1000:
                assert gpu[name][g] == 1000
            gpu[name][g] -= milli
        cpu[name] -= int(r["cpu_milli"])
        mem[name] -= int(r["memory_mib"])
        placed += 1
    return placed


def test_every_placement_in_the_csvs_is_feasible(tmp_path):
    pods, nodes = _write_synthetic(tmp_path)
    out = tmp_path / "out"
    summary = run_openb(str(pods), str(nodes), ["random", "bestfit", "fgd"], [1, 2], str(out), 1)
    node_list = load_nodes(nodes)
    for policy in ("random", "bestfit", "fgd"):
        for seed in (1, 2):
            with open(out / f"{policy}-{seed}.csv", newline="") as f:
                reader = csv.DictReader(f)
                assert reader.fieldnames == [
                    "seq", "pod", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli",
                    "gpu_spec", "node", "gpus",
                ]  # fmt: skip
                rows = list(reader)
            assert [int(r["seq"]) for r in rows] == list(range(len(rows)))
            assert _replay(rows, node_list) > 0
    assert (out / "summary.json").exists()
    assert set(summary["policies"]) == {"random", "bestfit", "fgd"}


@pytest.mark.parametrize("policy", ["random", "bestfit", "fgd"])
def test_runs_are_deterministic_per_seed(tmp_path, policy):
    pods, nodes = _write_synthetic(tmp_path)
    trace, node_list = load_pods(pods), load_nodes(nodes)
    typical = typical_pods(trace)
    a = simulate(trace, node_list, policy, 5, typical)
    b = simulate(trace, node_list, policy, 5, typical)
    c = simulate(trace, node_list, policy, 6, typical)
    assert a[1] == b[1]
    assert a[0]["unallocated_pct_at_100"] == b[0]["unallocated_pct_at_100"]
    assert a[1] != c[1]


def _hand_typical():
    return [
        TypicalPod(4000, 500, 1, "", 0.4),  # fractional: only GPUs with < 500 left are lost
        TypicalPod(16000, 1000, 1, "", 0.3),  # needs more CPU than the node has: all lost
        TypicalPod(1000, 0, 0, "", 0.1),  # CPU-only: all idle GPU counts
        TypicalPod(0, 1000, 2, "V100M32", 0.2),  # wrong model: all lost
    ]


def test_fragmentation_of_a_hand_computed_node():
    frag = Fragmentation(_hand_typical())
    # T4 node, 8 cores left, GPUs with 1000 and 300 milli left (1300 idle).
    # 0.4*300 + 0.3*1300 + 0.1*1300 + 0.2*1300 = 120 + 390 + 130 + 260 = 900
    assert frag("T4", 8000, (300, 1000)) == pytest.approx(900.0)
    # After a 200-milli pod on the 300 GPU: 0.4*100 + (0.3+0.1+0.2)*1100 = 700
    assert frag("T4", 7000, (100, 1000)) == pytest.approx(700.0)
    # After it on the free GPU: 0.4*300 + 0.6*1100 = 780
    assert frag("T4", 7000, (300, 800)) == pytest.approx(780.0)
    # Enough CPU for the whole-GPU task: it can use the free GPU, loses the 300 one.
    assert frag("T4", 16000, (300, 1000)) == pytest.approx(120 + 0.3 * 300 + 130 + 260)
    # No idle GPU, no fragment.
    assert frag("T4", 8000, (0, 0)) == 0.0


def test_fgd_picks_the_gpu_that_grows_fragmentation_least():
    cluster = Cluster([Node("a", 8000, 65536, 2, "T4")])
    cluster.place(0, make_pod("x", 0, 0, 1, 700), (1,))  # GPU 1 left with 300
    policy = FGDPolicy(_hand_typical())
    policy.reset(cluster, random.Random(0))
    node, gpus = policy.choose(make_pod("y", 1000, 1024, 1, 200), cluster)
    # 900 -> 700 (score int(100*sigmoid(0.2)) = 54) beats 900 -> 780 (52).
    assert (node, gpus) == (0, (1,))
    assert policy.evaluate(0, make_pod("y", 1000, 1024, 1, 200), cluster)[0] == 54


def test_typical_pods_cut_at_popularity_and_renormalise():
    pods = [make_pod(f"p{i}", 1000, 1, 1, 500) for i in range(6)]
    pods += [make_pod(f"q{i}", 2000, 1, 0, 0) for i in range(3)]
    pods += [make_pod("r", 4000, 1, 2, 1000)]
    got = typical_pods(pods, popularity=0.9)
    assert [(t.cpu_milli, t.num_gpu) for t in got] == [(1000, 1), (2000, 0)]
    assert [t.share for t in got] == pytest.approx([6 / 9, 3 / 9])


def _tiny(gpus=2):
    return [Node("solo", 64000, 65536, gpus, "T4")]


def test_metric_at_100_percent_counts_what_is_allocated_then():
    # Capacity 2000; three 700-milli pods arrive: 2100 >= 2000 at the third. Two share-free
    # GPUs take two pods, the third cannot fit: 600 of 2000 unallocated = 30%.
    trace = [make_pod(f"p{i}", 1000, 1024, 1, 700) for i in range(3)]
    for policy in ("random", "bestfit", "fgd"):
        metrics, rows = simulate(trace, _tiny(), policy, 1, typical_pods(trace), ratio=1.0)
        assert len(rows) == 3
        assert metrics["at_arrived_pct"]["100"]["pods"] == 3
        assert metrics["unallocated_pct_at_100"] == pytest.approx(30.0)
        assert metrics["failed"] == 1


def test_metric_with_resampling_to_130_percent():
    # 500-milli pods: 100% is reached exactly at the 4th pod (all placed, 0% unallocated);
    # resampling appends pods until 2600 >= 1.3 * 2000, i.e. 6 pods, two of them skipped.
    trace = [make_pod(f"p{i}", 1000, 1024, 1, 500) for i in range(2)]
    metrics, rows = simulate(trace, _tiny(), "bestfit", 3, typical_pods(trace))
    assert len(rows) == 6
    assert metrics["at_arrived_pct"]["100"]["pods"] == 4
    assert metrics["unallocated_pct_at_100"] == pytest.approx(0.0)
    assert metrics["failed"] == 2


def test_multi_gpu_pods_need_whole_free_gpus_on_one_node():
    cluster = Cluster([Node("a", 64000, 65536, 2, "T4"), Node("b", 64000, 65536, 4, "G2")])
    cluster.place(1, make_pod("s", 0, 0, 1, 100), (0,))
    pod = make_pod("m", 1000, 1024, 4, 1000)
    assert not cluster.fits(0, pod) and not cluster.fits(1, pod)
    assert make_policy("bestfit", []).choose(pod, cluster) is None
    pod3 = make_pod("m3", 1000, 1024, 3, 1000)
    assert make_policy("bestfit", []).choose(pod3, cluster) == (1, (1, 2, 3))
    spec = make_pod("t", 1000, 1024, 1, 1000, "T4")
    assert make_policy("bestfit", []).choose(spec, cluster)[0] == 0


def test_parse_seeds():
    assert parse_seeds("42-45") == [42, 43, 44, 45]
    assert parse_seeds("1,3,5-6") == [1, 3, 5, 6]
