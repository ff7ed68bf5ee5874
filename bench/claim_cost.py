"""``python -m bench.claim_cost [--image IMAGE] [--claims N]``: what one warm claim costs the node.

A booked class claims its warm desktops all at once, so the claim's CPU, wherever it is
spent, decides how fast the class gets its desktops on a busy node. This starts ``--claims``
warm desktops (default 10, tiny image: ``deskpool/tiny:latest``), lets them go idle, then
claims them one at a time as the agent does (``DockerRuntime.claim``: the student's new home
volume, the password, ``deskpool-claim --language`` through the claim pipes, the VNC login
through websockify) and, from each claim's start until ``--after-s`` (3) seconds after it
returned, so that the session started again is counted too, measures:

- the desktop's CPU: its container's cgroup (every process in it: the claim's scripts,
  the session started again, Xvnc and websockify answering the login);
- the processes started on the whole machine (``/proc/stat``): in the desktop, and the
  agent's own (``mount``, ``mkfs.ext4``);
- the whole machine's busy CPU (the agent's Python, dockerd, the kernel's mounts);
- the claim's wall time.

Prints the mean, min and max of each. Run on a quiet machine; every container, volume and
mount it makes is removed at the end (:class:`bench.agent.Bench`).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from bench.agent import Bench, parse_args
from bench.cpu import container_cpu_s, machine_busy_s, processes_started

SETTLE_S = 8.0  # warm desktops started together go idle within this


def claim_costs(bench: Bench, claims: int, after_s: float) -> dict[str, list[float]]:
    """Each claim's desktop CPU (ms), processes started, machine busy (ms) and wall (s)."""
    keys = [f"cost{os.getpid()}-{n}" for n in range(claims)]
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(bench.start_warm, keys))
    time.sleep(SETTLE_S)
    found = {w.key: w.container_id for w in bench.runtime.list_warm()}
    costs: dict[str, list[float]] = {"desktop": [], "processes": [], "busy": [], "wall": []}
    for key in keys:
        session = bench.session()
        container = found[key]
        cpu, started, busy = container_cpu_s(container), processes_started(), machine_busy_s()
        begun = time.perf_counter()
        bench.runtime.claim(key, session)
        costs["wall"].append(time.perf_counter() - begun)
        time.sleep(after_s)
        cpu_after = container_cpu_s(container)
        if cpu is not None and cpu_after is not None:
            costs["desktop"].append(1000 * (cpu_after - cpu))
        costs["processes"].append(processes_started() - started)
        costs["busy"].append(1000 * (machine_busy_s() - busy))
        bench.runtime.stop(session.session_id)
    return costs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", default="deskpool/tiny:latest")
    parser.add_argument("--claims", type=int, default=10)
    parser.add_argument("--language", default="zh-hans")
    parser.add_argument("--after-s", type=float, default=3.0)
    args = parser.parse_args(argv)
    bench = Bench(
        parse_args(
            ["--image", args.image, "--language", args.language, "--memory-mb", "512"]
            + ["--sequential", "0", "--parallel", "0", "--warm", "0", "--warm-together", "0"]
        )
    )
    try:
        bench.client.images.get(args.image)
    except Exception:
        print(f"image {args.image} is not present: bash nodeagent/images/build.sh all")
        return 2
    try:
        costs = claim_costs(bench, args.claims, args.after_s)
    finally:
        bench.clean_up()
    load = ", ".join(f"{n:.1f}" for n in os.getloadavg())
    print(
        f"bench.claim_cost: {args.claims} warm claims of {args.image}, one at a time, each "
        f"counted until {args.after_s:g} s after it returned; {os.cpu_count()} CPUs, "
        f"load average {load}"
    )
    units = {"desktop": "ms", "processes": "", "busy": "ms", "wall": "s"}
    names = {
        "desktop": "the desktop's CPU (its cgroup)",
        "processes": "processes started on the machine",
        "busy": "the machine busy (all CPUs, idle desktops included)",
        "wall": "the claim's wall time",
    }
    for name, values in costs.items():
        if not values:
            continue
        unit = units[name]
        digits = 3 if unit == "s" else 1
        print(
            f"  {names[name]}: mean {statistics.mean(values):.{digits}f}{unit and ' ' + unit}, "
            f"min {min(values):.{digits}f}, max {max(values):.{digits}f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
