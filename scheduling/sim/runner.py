"""One simulated run (policy x seed) and the openb experiment over several of them."""

from __future__ import annotations

import csv
import json
import os
import statistics
import time
from collections.abc import Sequence
from multiprocessing import get_context
from pathlib import Path

from .cluster import Cluster
from .policies import make_policy
from .trace import Node, Pod, load_nodes, load_pods
from .workload import TypicalPod, build_workload, typical_pods

CHECKPOINTS = (0.9, 0.95, 1.0, 1.3)
CSV_COLUMNS: tuple[str, ...] = ("seq", "pod", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")
CSV_COLUMNS += ("gpu_spec", "node", "gpus")


def simulate(
    trace: Sequence[Pod],
    nodes: Sequence[Node],
    policy_name: str,
    seed: int,
    typical: Sequence[TypicalPod],
    ratio: float = 1.3,
) -> tuple[dict, list[tuple]]:
    """Run one policy on one seed. Returns (metrics, CSV rows)."""
    capacity = 1000 * sum(n.num_gpu for n in nodes)
    workload, rng = build_workload(trace, capacity, seed, ratio)
    order = list(range(len(nodes)))
    rng.shuffle(order)  # the seed's fixed tie order: lower index wins equal scores
    cluster = Cluster([nodes[i] for i in order])
    policy = make_policy(policy_name, typical)
    policy.reset(cluster, rng)

    rows: list[tuple] = []
    arrived = 0
    failed = 0
    marks = list(CHECKPOINTS)
    at: dict[str, dict] = {}
    start = time.perf_counter()
    for seq, pod in enumerate(workload):
        arrived += pod.gpu_request
        choice = policy.choose(pod, cluster)
        if choice is None:
            failed += 1
            node, gpus = "", ""
        else:
            j, ids = choice
            cluster.place(j, pod, ids)
            node, gpus = cluster.nodes[j].name, ";".join(map(str, ids))
        rows.append(
            (seq, pod.name, pod.cpu_milli, pod.memory_mib, pod.num_gpu, pod.gpu_milli)
            + (pod.gpu_spec, node, gpus)
        )
        while marks and arrived >= marks[0] * capacity:
            mark = marks.pop(0)
            at[f"{round(mark * 100)}"] = {
                "pods": seq + 1,
                "failed": failed,
                "allocated_pct": 100.0 * cluster.gpu_allocated / capacity,
                "unallocated_pct": 100.0 * (capacity - cluster.gpu_allocated) / capacity,
            }
    elapsed = time.perf_counter() - start
    metrics = {
        "policy": policy_name,
        "seed": seed,
        "pods": len(workload),
        "failed": failed,
        "gpu_capacity_milli": capacity,
        "unallocated_pct_at_100": at["100"]["unallocated_pct"],
        "at_arrived_pct": at,
        "seconds": elapsed,
        "placements_per_s": len(workload) / elapsed if elapsed else 0.0,
    }
    return metrics, rows


def write_rows(path: Path, rows: Sequence[tuple]) -> None:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(CSV_COLUMNS)
        w.writerows(rows)


_CTX: dict = {}


def _init(trace, nodes, typical, ratio, out):
    _CTX.update(trace=trace, nodes=nodes, typical=typical, ratio=ratio, out=out)


def _run_task(task: tuple[str, int]) -> dict:
    policy, seed = task
    metrics, rows = simulate(
        _CTX["trace"], _CTX["nodes"], policy, seed, _CTX["typical"], _CTX["ratio"]
    )
    if _CTX["out"] is not None:
        write_rows(Path(_CTX["out"]) / f"{policy}-{seed}.csv", rows)
    return metrics


def summarise(runs: Sequence[dict], policies: Sequence[str]) -> dict:
    out = {}
    for p in policies:
        mine = sorted((r for r in runs if r["policy"] == p), key=lambda r: r["seed"])
        vals = [r["unallocated_pct_at_100"] for r in mine]
        pods = sum(r["pods"] for r in mine)
        secs = sum(r["seconds"] for r in mine)
        out[p] = {
            "unallocated_pct_at_100_mean": statistics.fmean(vals),
            "unallocated_pct_at_100_std": statistics.stdev(vals) if len(vals) > 1 else 0.0,
            "per_seed": {str(r["seed"]): r["unallocated_pct_at_100"] for r in mine},
            "placements_per_s": pods / secs if secs else 0.0,
            "runs": mine,
        }
    return out


def format_table(summary: dict) -> str:
    lines = [
        f"{'policy':<10} {'unallocated GPU % @100% arrived':>32} {'seeds':>6} {'placements/s':>13}",
    ]
    for p, s in summary.items():
        cell = f"{s['unallocated_pct_at_100_mean']:.2f} ± {s['unallocated_pct_at_100_std']:.2f}"
        lines.append(f"{p:<10} {cell:>32} {len(s['per_seed']):>6} {s['placements_per_s']:>13.0f}")
    return "\n".join(lines)


def run_openb(
    pods_path: str,
    nodes_path: str,
    policies: Sequence[str],
    seeds: Sequence[int],
    out: str | None,
    jobs: int | None = None,
    ratio: float = 1.3,
    popularity: float = 0.95,
) -> dict:
    trace = load_pods(pods_path)
    nodes = load_nodes(nodes_path)
    typical = typical_pods(trace, popularity)
    if out is not None:
        os.makedirs(out, exist_ok=True)
    tasks = [(p, s) for p in policies for s in seeds]
    jobs = max(1, min(jobs or os.cpu_count() or 1, len(tasks)))
    wall = time.perf_counter()
    if jobs == 1:
        _init(trace, nodes, typical, ratio, out)
        runs = [_run_task(t) for t in tasks]
    else:
        ctx = get_context("fork")
        with ctx.Pool(jobs, _init, (trace, nodes, typical, ratio, out)) as pool:
            runs = pool.map(_run_task, tasks, chunksize=1)
    wall = time.perf_counter() - wall
    summary = {
        "pods_file": str(pods_path),
        "nodes_file": str(nodes_path),
        "nodes": len(nodes),
        "gpus": sum(n.num_gpu for n in nodes),
        "trace_pods": len(trace),
        "typical_pod_shapes": len(typical),
        "ratio": ratio,
        "seeds": list(seeds),
        "jobs": jobs,
        "wall_seconds": wall,
        "std": "sample standard deviation over seeds",
        "policies": summarise(runs, policies),
    }
    if out is not None:
        with open(Path(out) / "summary.json", "w") as f:
            json.dump(summary, f, indent=2)
    return summary
