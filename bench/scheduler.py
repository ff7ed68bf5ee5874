"""Scheduler bench: ``python -m bench.scheduler`` (pure Python, no Django; see ``docs/sim.md``).

Two figures, one process on one core:

1. the full default openb replay with the simulator's ``deskpool`` policy (one seed):
   placements per second;
2. one planning cycle of :func:`scheduling.engine.plan` with 10,000 queued requests against the
   trace's GPU pool: wall time of one ``plan()`` call, median of 3. ``--homes F`` gives a
   share F of the requests a home node each (``QueuedRequest.home_nodes``).
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

from scheduling.engine import FreeSlice, NodeState, QueuedRequest, Snapshot, plan
from scheduling.sim.runner import simulate
from scheduling.sim.trace import Node, Pod, load_nodes, load_pods
from scheduling.sim.workload import typical_pods

TRACES = Path(__file__).resolve().parents[2] / "shared" / "traces" / "alibaba-gpu-v2023"
DEFAULT_PODS = TRACES / "openb_pod_list_default.csv"
DEFAULT_NODES = TRACES / "openb_node_list_gpu_node.csv"
NOW = datetime(2026, 12, 2, 9, 58, tzinfo=UTC)

# GPU memory per trace model (MB), for the engine snapshot; unknown models get 16 GB.
GPU_MEMORY_MB = {
    "P100": 16384,
    "T4": 16384,
    "V100M16": 16384,
    "V100M32": 32768,
    "A10": 24576,
    "G2": 16384,
    "G3": 32768,
}


def engine_snapshot(
    nodes: Sequence[Node], pods: Sequence[Pod], requests: int, seed: int = 42, homes: float = 0.0
) -> Snapshot:
    """An engine snapshot of the trace's pool, with ``requests`` queued requests.

    Nodes: all healthy, CPU = ``cpu_milli / 1000``, RAM = ``memory_mib``. Each GPU is one
    ``whole`` free slice with its model's memory (``GPU_MEMORY_MB``). Requests: pods drawn with
    replacement (``random.Random(seed)``), tier uniform in 0-3, submitted one second apart;
    ``gpu_count = num_gpu``, kinds ``("whole",)``, GPU memory minimum ``gpu_milli * 16`` MB
    (a fraction of a 16 GB GPU), CPU and RAM from the pod. With ``homes``, that share of the
    requests (drawn by ``random.Random(seed + 1)``, so the rest is unchanged) have one home
    node, any node of the pool.
    """
    rng = random.Random(seed)
    states: list[NodeState] = []
    slices: list[FreeSlice] = []
    for node_id, n in enumerate(nodes, start=1):
        states.append(NodeState(node_id, n.name, True, n.cpu_milli / 1000, n.memory_mib))
        memory = GPU_MEMORY_MB.get(n.model, 16384)
        for g in range(n.num_gpu):
            gpu_id = node_id * 100 + g
            slices.append(FreeSlice(len(slices) + 1, node_id, gpu_id, "whole", memory, n.model))
    queue: list[QueuedRequest] = []
    for i in range(requests):
        pod = rng.choice(pods)
        queue.append(
            QueuedRequest(
                session_id=i + 1,
                tier=rng.randrange(4),
                submitted_at=NOW - timedelta(seconds=requests - i),
                gpu_count=pod.num_gpu,
                gpu_memory_min_mb=pod.gpu_milli * 16,
                allowed_kinds=("whole",) if pod.num_gpu else (),
                cpus=pod.cpu_milli / 1000,
                memory_mb=pod.memory_mib,
            )
        )
    if homes:
        draw = random.Random(seed + 1)
        queue = [
            replace(r, home_nodes=(draw.randint(1, len(nodes)),)) if draw.random() < homes else r
            for r in queue
        ]
    return Snapshot(tuple(states), tuple(slices), tuple(queue))


def bench_replay(pods: Sequence[Pod], nodes: Sequence[Node], seed: int) -> dict:
    metrics, _ = simulate(pods, nodes, "deskpool", seed, typical_pods(pods))
    return metrics


def bench_plan(snapshot: Snapshot, repeat: int = 3) -> tuple[float, int, int]:
    times = []
    result = None
    for _ in range(repeat):
        start = time.perf_counter()
        result = plan(snapshot, NOW)
        times.append(time.perf_counter() - start)
    assert result is not None
    return statistics.median(times), len(result.placements), len(result.queue)


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.scheduler", description=__doc__)
    ap.add_argument("--pods", default=str(DEFAULT_PODS))
    ap.add_argument("--nodes", default=str(DEFAULT_NODES))
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--requests", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument(
        "--homes", type=float, default=0.0, help="share of requests with a home node (0-1)"
    )
    ap.add_argument("--skip-replay", action="store_true", help="only the plan() figure")
    args = ap.parse_args(argv)

    pods = load_pods(args.pods)
    nodes = load_nodes(args.nodes)
    gpus = sum(n.num_gpu for n in nodes)
    print(f"{args.pods} on {args.nodes}: {len(pods)} pods, {len(nodes)} nodes, {gpus} GPUs")
    if not args.skip_replay:
        m = bench_replay(pods, nodes, args.seed)
        print(
            f"replay  deskpool seed {args.seed}: {m['pods']} pods in {m['seconds']:.2f} s, "
            f"{m['placements_per_s']:.0f} placements/s"
        )
    snapshot = engine_snapshot(nodes, pods, args.requests, args.seed, args.homes)
    secs, placed, waiting = bench_plan(snapshot, args.repeat)
    homed = f" ({args.homes:.0%} with a home node)" if args.homes else ""
    print(
        f"plan()  {args.requests} requests{homed}, {len(snapshot.free_slices)} free slices: "
        f"{secs * 1000:.1f} ms (median of {args.repeat}), {placed} placed, {waiting} waiting"
    )


if __name__ == "__main__":
    main()
