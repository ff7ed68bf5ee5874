"""``python -m bench.agent [--image IMAGE]``: node-agent figures on this machine's dockerd.

Drives :class:`~nodeagent.runtime.docker_runtime.DockerRuntime` directly (no portal, no
Django), with the real readiness check (a VNC handshake through websockify):

1. assignment → RUNNING: ``runtime.start(desired_session)`` until the handshake works,
   20 desktops one at a time (each stopped before the next), median and p95;
2. throughput: 10 desktops started in parallel (as the agent's 10 start workers do),
   desktops per minute from the first start call to the last handshake;
3. memory: those 10 left idle for 10 s, then the memory of each container's cgroup as
   ``docker stats`` reports it (usage, and usage less inactive file cache, which is what
   the ``docker stats`` command line shows), mean;
4. warm claim → RUNNING (``--warm``, default 20): a warm desktop is started for a booking
   (``runtime.start_warm``, not timed) and left idle ``--warm-settle-s`` (as a warm desktop
   waits for its student), then ``runtime.claim(key, session)`` is timed for a person of
   ``--language`` (default zh-hans): the student's home volume mounted, the session's
   password written into the mounted folder, ``deskpool-claim --language`` run in the
   container (the password applied, the warm X session killed and started again in the
   person's locale), and the VNC login with the new password. One at a time, median and p95,
   next to figure 1. Then, not part of the claim, the new session's settling: the time from
   the claim's start until every process of ``--settled`` (default: XFCE's panel and desktop
   and fcitx5; ``xterm`` for the tiny image) runs again in the container, polled by exec
   every 0.05 s (started, not necessarily painted);
5. warm claims at once (``--warm-together``, default 20): as at a booked class start, that
   many warm desktops started (not timed) and left idle ``--together-settle-s`` (started
   together, they take longer to go idle than one), then all claimed together on
   ``--claim-workers`` threads (10: the agent's start workers); each claim's time, and the
   time until the last one is RUNNING.

``--parallel 0`` skips figures 2 and 3. ``--password-only`` claims as before issue 36
(``deskpool-claim`` without ``--language`` with ``docker exec``: the password alone, no session
restarted), for figures 4 and 5 under the same load as a run without it (docs/scheduling.md,
"Warm pool"). ``--exec`` claims with ``docker exec`` instead of the claim pipes
(``nodeagent/runtime/claim_pipes.py``), as before them. ``--returning``: the claiming students'
homes exist before the claims (as a class's returning students' do), so that figures 4 and 5
leave out making a home.

Every container, volume, network, mount and password folder it makes is removed at the
end, also on Ctrl-C. Containers are labelled ``deskpool.node=<--node>`` (default
``bench-<pid>``).
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from pathlib import Path
from typing import get_args

from nodeagent.protocol import LABEL_NODE, DesiredSession, DesiredWarm, DesktopLanguage
from nodeagent.runtime import claim_pipes, docker_warm, home_mounts
from nodeagent.runtime.desktop_network import remove_networks
from nodeagent.runtime.docker_runtime import DockerRuntime, docker_client
from nodeagent.runtime.docker_warm import WARM_HOMES_DIR_NAME

SESSION_ID_BASE = 900_000
# The names of the container's processes, one a line (no ps in the images).
PROCESS_NAMES = "cat /proc/[0-9]*/comm 2>/dev/null"
SETTLE_LIMIT_S = 30.0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.agent", description=__doc__)
    parser.add_argument("--image", default="deskpool/desktop:latest")
    parser.add_argument("--sequential", type=int, default=20, help="desktops one at a time")
    parser.add_argument("--parallel", type=int, default=10, help="desktops started together")
    parser.add_argument("--idle-s", type=float, default=10.0, help="idle time before memory")
    parser.add_argument("--warm", type=int, default=20, help="warm desktops claimed, 0: none")
    parser.add_argument(
        "--warm-together", type=int, default=20, help="warm desktops claimed at once, 0: none"
    )
    parser.add_argument("--claim-workers", type=int, default=10, help="threads claiming at once")
    parser.add_argument(
        "--together-settle-s",
        type=float,
        default=15.0,
        help="the --warm-together desktops' idle time before their claims",
    )
    parser.add_argument(
        "--warm-settle-s",
        type=float,
        default=3.0,
        help="a warm desktop's idle time before its claim",
    )
    parser.add_argument(
        "--language",
        default="zh-hans",
        choices=get_args(DesktopLanguage),
        help="the claiming person's language (the claim starts the session again in it)",
    )
    parser.add_argument(
        "--password-only",
        action="store_true",
        help="claim as before issue 36: deskpool-claim without --language (the password "
        "alone, no session restart), for a comparison under the same load",
    )
    parser.add_argument(
        "--exec",
        action="store_true",
        help="claim with docker exec, not through the claim pipes (as before them)",
    )
    parser.add_argument(
        "--returning",
        action="store_true",
        help="make each claiming student's home before the claims (returning students)",
    )
    parser.add_argument(
        "--settled",
        default="xfce4-panel,xfdesktop,fcitx5",
        help="processes whose start ends a claimed session's settling (figure 4), comma-separated",
    )
    parser.add_argument("--cpus", type=float, default=1.0)
    parser.add_argument("--memory-mb", type=int, default=2048)
    parser.add_argument("--node", default=f"bench-{os.getpid()}")
    return parser.parse_args(argv)


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.client = docker_client()
        self.state_dir = Path(tempfile.mkdtemp(prefix="deskpool-bench-"))
        self.runtime = DockerRuntime(
            self.client,
            node_name=args.node,
            sessions_dir=self.state_dir / "sessions",
            stop_grace_s=2,
            ready_timeout_s=120,
        )
        self.next_id = SESSION_ID_BASE + (os.getpid() % 1000) * 100
        self.volumes: set[str] = set()

    def session(self) -> DesiredSession:
        self.next_id += 1
        volume = f"deskpool-bench-{self.args.node}-{self.next_id}"
        self.volumes.add(volume)
        if self.args.returning:
            self.runtime.home_folder(volume, create=True)  # as the Files page makes one
        return DesiredSession(
            session_id=self.next_id,
            user=f"bench{self.next_id}",
            course="",
            image=self.args.image,
            cpus=self.args.cpus,
            memory_mb=self.args.memory_mb,
            pids_limit=1024,
            shm_mb=256,
            gpu_devices=[],
            vnc_password="bench123",
            home_volume=volume,
            language=self.args.language,
        )

    def timed_start(self, session: DesiredSession) -> float:
        started = time.perf_counter()
        self.runtime.start(session)
        return time.perf_counter() - started

    def sequential(self) -> list[float]:
        times = []
        for _ in range(self.args.sequential):
            session = self.session()
            times.append(self.timed_start(session))
            self.runtime.stop(session.session_id)
        return times

    def start_warm(self, key: str) -> None:
        self.runtime.start_warm(
            DesiredWarm(
                key=key,
                booking=0,
                course="",
                image=self.args.image,
                cpus=self.args.cpus,
                memory_mb=self.args.memory_mb,
                pids_limit=1024,
                shm_mb=256,
                gpu_devices=[],
            )
        )

    def timed_claim(self, key: str, session: DesiredSession) -> float:
        started = time.perf_counter()
        self.runtime.claim(key, session)
        return time.perf_counter() - started

    def warm_claims(self) -> tuple[list[float], list[float]]:
        """Figure 4: each claim's time, and each claimed session's settling time."""
        times, settled = [], []
        for i in range(self.args.warm):
            key = f"bench{os.getpid()}-{i}"
            self.start_warm(key)
            time.sleep(self.args.warm_settle_s)
            session = self.session()
            started = time.perf_counter()
            claimed = self.runtime.claim(key, session)
            times.append(time.perf_counter() - started)
            settled.append(self.settled(claimed.container_id, started))
            self.runtime.stop(session.session_id)
        return times, settled

    def settled(self, container_id: str, started: float) -> float:
        """Seconds from ``started`` until every ``--settled`` process runs in the container
        (polled every 0.05 s; SETTLE_LIMIT_S at most)."""
        wanted = {name for name in self.args.settled.split(",") if name}
        container = self.client.containers.get(container_id)
        while True:
            found = container.exec_run(["sh", "-c", PROCESS_NAMES]).output.decode().split()
            elapsed = time.perf_counter() - started
            if wanted <= set(found) or elapsed > SETTLE_LIMIT_S:
                return elapsed
            time.sleep(0.05)

    def warm_together(self) -> tuple[float, list[float]]:
        """Figure 5: the warm desktops of a class, claimed at once."""
        keys = [f"bench{os.getpid()}-t{i}" for i in range(self.args.warm_together)]
        with ThreadPoolExecutor(4) as pool:  # started a few at a time, as the warm pool does
            list(pool.map(self.start_warm, keys))
        time.sleep(self.args.together_settle_s)
        sessions = [self.session() for _ in keys]
        started = time.perf_counter()
        with ThreadPoolExecutor(self.args.claim_workers) as pool:
            each = list(pool.map(self.timed_claim, keys, sessions))
        wall = time.perf_counter() - started
        for session in sessions:
            self.runtime.stop(session.session_id)
        return wall, each

    def parallel(self) -> tuple[float, list[float]]:
        sessions = [self.session() for _ in range(self.args.parallel)]
        started = time.perf_counter()
        with ThreadPoolExecutor(len(sessions)) as pool:
            each = list(pool.map(self.timed_start, sessions))
        return time.perf_counter() - started, each

    def idle_memory(self) -> tuple[list[float], list[float]]:
        time.sleep(self.args.idle_s)
        usage, less_cache = [], []
        for container in self.client.containers.list(
            filters={"label": f"{LABEL_NODE}={self.args.node}"}
        ):
            memory = container.stats(stream=False)["memory_stats"]
            raw = memory.get("usage", 0)
            stats = memory.get("stats", {})
            cache = stats.get("inactive_file", stats.get("total_inactive_file", 0))
            usage.append(raw / 2**20)
            less_cache.append((raw - cache) / 2**20)
        return usage, less_cache

    def clean_up_containers(self) -> None:
        for container in self.client.containers.list(
            all=True, filters={"label": f"{LABEL_NODE}={self.args.node}"}
        ):
            with suppress(Exception):
                container.remove(force=True)

    def clean_up(self) -> None:
        self.clean_up_containers()
        homes = self.state_dir / "sessions" / WARM_HOMES_DIR_NAME
        for home in homes.iterdir() if homes.is_dir() else ():
            home_mounts.release(home)  # unmounted first: never delete through a mount
        for name in self.volumes:
            with suppress(Exception):
                self.client.volumes.get(name).remove(force=True)
        shutil.rmtree(self.state_dir, ignore_errors=True)
        with suppress(Exception):
            remove_networks(self.client, self.args.node)


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(0.95 * len(ordered)) - 1))]


def nothing_listens(directory: Path, language: str, timeout_s: float = 0.0) -> int | None:
    """``--exec``'s claim pipes: nobody listens, so the claim runs ``docker exec``."""
    return None


def password_only(session: DesiredSession) -> list[str]:
    """``--password-only``'s claim command: the password alone, as before issue 36."""
    return list(docker_warm.CLAIM_COMMAND)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.ERROR)
    if args.password_only or args.exec:
        claim_pipes.ask = nothing_listens  # this process only: docker exec
    if args.password_only:
        docker_warm.claim_command = password_only  # this process only: the comparison
        args.settled = ""  # nothing restarts
    bench = Bench(args)
    try:
        bench.client.images.get(args.image)
    except Exception:
        print(f"image {args.image} is not present: bash nodeagent/images/build.sh all")
        return 2
    info = bench.client.info()
    wall = 0.0
    each: list[float] = []
    usage: list[float] = []
    less_cache: list[float] = []
    claims: list[float] = []
    settled: list[float] = []
    together: list[float] = []
    together_wall = 0.0
    try:
        sequential = bench.sequential()
        if args.parallel:
            wall, each = bench.parallel()
            usage, less_cache = bench.idle_memory()
            bench.clean_up_containers()
        if args.warm:
            claims, settled = bench.warm_claims()
        if args.warm_together:
            together_wall, together = bench.warm_together()
    finally:
        bench.clean_up()
    rows = [
        (
            f"assignment -> RUNNING, {len(sequential)} one at a time",
            f"median {statistics.median(sequential):.2f} s, p95 {p95(sequential):.2f} s, "
            f"min {min(sequential):.2f} s, max {max(sequential):.2f} s",
        ),
    ]
    if claims:
        rows.append(
            (
                f"warm claim -> RUNNING, {len(claims)} one at a time",
                f"median {statistics.median(claims):.2f} s, p95 {p95(claims):.2f} s, "
                f"min {min(claims):.2f} s, max {max(claims):.2f} s "
                f"({'password only' if args.password_only else 'language ' + args.language}; "
                f"warm desktop idle {args.warm_settle_s:g} s before)",
            )
        )
    if claims and not args.password_only:
        rows.append(
            (
                "claim -> session settled, one at a time",
                f"median {statistics.median(settled):.2f} s, p95 {p95(settled):.2f} s, "
                f"max {max(settled):.2f} s (until {args.settled} run again)",
            )
        )
    if together:
        rows.append(
            (
                f"warm claim -> RUNNING, {len(together)} at once",
                f"all RUNNING after {together_wall:.2f} s on {args.claim_workers} threads "
                f"(each: median {statistics.median(together):.2f} s, p95 {p95(together):.2f} s, "
                f"max {max(together):.2f} s; idle {args.together_settle_s:g} s before; "
                f"{'docker exec' if args.exec or args.password_only else 'claim pipes'}, "
                f"{'homes made before' if args.returning else 'new homes'})",
            )
        )
    if each:
        rows += [
            (
                f"{len(each)} started in parallel",
                f"all RUNNING after {wall:.2f} s = {len(each) / wall * 60:.0f} desktops/min "
                f"(each {min(each):.2f}-{max(each):.2f} s)",
            ),
            (
                f"host memory per idle desktop ({len(usage)} idle, {args.idle_s:.0f} s)",
                f"mean {statistics.mean(less_cache):.0f} MiB without page cache "
                f"(min {min(less_cache):.0f}, max {max(less_cache):.0f}); "
                f"{statistics.mean(usage):.0f} MiB with it",
            ),
        ]
    print(
        f"bench.agent: image {args.image}, {args.cpus:g} CPU / {args.memory_mb} MB "
        f"per desktop; host {info.get('NCPU')} CPUs, {info.get('MemTotal', 0) / 2**30:.0f} GiB, "
        f"dockerd {info.get('ServerVersion')}, cgroup v{info.get('CgroupVersion', '?')}"
    )
    width = max(len(name) for name, _ in rows)
    print(f"| {'figure'.ljust(width)} | value |")
    print(f"|{'-' * (width + 2)}|-------|")
    for name, value in rows:
        print(f"| {name.ljust(width)} | {value} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
