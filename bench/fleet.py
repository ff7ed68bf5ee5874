"""``python -m bench.fleet``: a thousand idle node agents against one portal (issue 13).

``--agents`` simulated agents (coroutines in this process; each node one simulated A100 of 7
MIG instances) register, then follow the portal as ``nodeagent.agent.PortalFollower`` does:
one ``wait/`` after another, ``timeout_s`` = min(wait_s, heartbeat interval) × U(0.9, 1.0), a
heartbeat inside when one is due. Over ``--window`` s it counts their requests, the CPU of
daphne and the worker, the oldest heartbeat of the live nodes, and for ``--placements``
sessions placed by the worker's real cycle the time from ``placed_at`` to the agent's answer
with it; then one agent goes silent (``--no-silence`` skips it) until its node is unhealthy.
Real daphne, worker, PostgreSQL and Redis (``tests/integration/stack.py``) with the portal's
default settings, in a database of its own (``<name>_bench_fleet``, dropped at the end); the
Redis database of REDIS_URL and the next are emptied first. Prints figures, asserts no time.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import math
import os
import random
import resource
import shutil
import ssl
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import django
import httpx
import redis

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
django.setup()

from django.conf import settings  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.db import connection  # noqa: E402
from django.db.models import Min  # noqa: E402

from bench.class_start import bench_profile, percentile  # noqa: E402
from bench.cpu import cpu_s  # noqa: E402
from scheduling.models import Node, Session  # noqa: E402
from scheduling.services.nodes import do_create_join_token  # noqa: E402
from scheduling.services.sessions import check_submit, do_stop, do_submit  # noqa: E402
from tests.conftest import give_thesis_grant, gpu_inventory, registration  # noqa: E402
from tests.integration.stack import ASGI_WORKER, ROOT, Stack, database_url_of  # noqa: E402

API = "/api/agent/v1/"
UNCHANGED: dict[str, Any] = {}  # a 204 answer: the desired state did not change
PREFIX = "bench-fleet-"
MIG_SLICES = 7
REGISTER_AT_ONCE = 16  # registrations in flight at once (the real fleet's come one by one)
WAIT_GRACE_S = 15.0  # the read timeout beyond the wait's own (nodeagent.portal_client's)
SAMPLE_S = 3.0  # the oldest heartbeat is read this often
PLACE_TIMEOUT_S = 30.0  # a placement not seen by its agent after this is reported as missed
ASGI = "portal.asgi:application"
LOGS = ROOT / "test-output" / "bench-fleet-logs"


def heartbeat(uuid: str) -> dict[str, Any]:
    """What a simulated idle node's probe reports: one GPU and its MIG instances."""

    def idle() -> dict[str, Any]:
        return {"memory_used_mb": random.randint(0, 32), "utilization_pct": random.random()}

    slices = [{"uuid": f"MIG-{uuid}-{slot}", **idle()} for slot in range(MIG_SLICES)]
    gpu = {"uuid": uuid, "temperature_c": 34.0, "power_w": 60.0, "power_limit_w": 400.0}
    gpu |= {"fan_pct": None, "xid_errors": [], "slices": slices, **idle()}
    return {"gpus": [gpu], "running_sessions": []}


class Fleet:
    """The simulated agents: one event loop in a thread of its own (the ORM stays in the
    main thread). Counters are read by the main thread under :attr:`lock`."""

    def __init__(self, url: str, joins: list[tuple[str, str]], ramp_s: float, ahead: bool) -> None:
        self.url = url
        self.ahead = ahead  # a heartbeat due before the wait ends goes with it (not the agent's)
        self.joins = joins
        self.ramp_s = ramp_s
        self.lock = threading.Lock()
        self.counts: Counter[str] = Counter()
        self.seen: dict[int, float] = {}  # session id -> time.time() of the first answer with it
        self.tasks: list[asyncio.Task[None]] = []
        self.loop: asyncio.AbstractEventLoop | None = None
        self.beat_gaps: list[float] = []  # seconds between an agent's heartbeats, as sent
        self.thread = threading.Thread(target=lambda: asyncio.run(self._main()), name="fleet")

    def count(self, *keys: str) -> None:
        with self.lock:
            self.counts.update(keys)

    def snapshot(self) -> Counter[str]:
        with self.lock:
            return Counter(self.counts)

    def stop(self) -> None:
        if self.loop is not None and not self.loop.is_closed():
            self.loop.call_soon_threadsafe(lambda: [t.cancel() for t in self.tasks])
        self.thread.join(30)

    async def _main(self) -> None:
        self.loop = asyncio.get_running_loop()
        gate = asyncio.Semaphore(REGISTER_AT_ONCE)
        tls = ssl.create_default_context()  # made once: unused (plain HTTP), costly per client
        self.tasks = [
            asyncio.create_task(self._agent(gate, tls, n, host, join))
            for n, (host, join) in enumerate(self.joins)
        ]
        await asyncio.gather(*self.tasks, return_exceptions=True)

    async def _call(
        self, http: httpx.AsyncClient, path: str, body: Any = None, token: str = "", **kw: Any
    ) -> Any:
        """One request (a GET without ``body``); its JSON answer, or None after counting why."""
        headers = {"Authorization": f"Node {token}"} if token else {}
        self.count("requests", path)
        method = "GET" if body is None else "POST"
        try:
            answer = await http.request(method, API + path, json=body, headers=headers, **kw)
        except httpx.TransportError as error:
            self.count("errors", f"{path} {type(error).__name__}")
            return None
        if answer.status_code == 204:
            return UNCHANGED
        if answer.status_code not in (200, 201):
            self.count("errors", f"{path} {answer.status_code}")
            return None
        return answer.json()

    async def _retry(self, http: httpx.AsyncClient, path: str, body: Any, token: str = "") -> Any:
        delay = 1.0
        for _attempt in range(8):
            if (answer := await self._call(http, path, body, token)) is not None:
                return answer
            await asyncio.sleep(delay * random.uniform(0.5, 1.0))
            delay = min(delay * 2, 10.0)  # the real agent's backoff, capped at 10 s
        raise RuntimeError(f"{path} failed 8 times")

    async def _agent(
        self, gate: asyncio.Semaphore, tls: ssl.SSLContext, n: int, host: str, join: str
    ) -> None:
        """One agent, with a client of its own as on a real node (a shared client's pool scans
        all its connections at each request: with 1,000 the simulator was the bottleneck)."""
        await asyncio.sleep(self.ramp_s * n / len(self.joins))
        timeout = httpx.Timeout(30.0, connect=10.0)
        async with httpx.AsyncClient(base_url=self.url, timeout=timeout, verify=tls) as http:
            uuid = f"GPU-{host}"
            async with gate:
                body = registration(host, [gpu_inventory(uuid, 0, mig_slices=MIG_SLICES)], join)
                try:
                    answer = await self._retry(http, "register/", body)
                except RuntimeError:
                    self.count("agents not registered")
                    return
            token = answer["node_token"]
            beat_s = answer["heartbeat_interval_s"]
            wait_s = min(answer["wait_s"], beat_s)
            # The real agent's first round: the desired state, then a heartbeat of its own.
            state = await self._retry(http, "desired/", None, token)
            await self._retry(http, "heartbeat/", heartbeat(uuid), token)
            beaten = time.monotonic()
            next_beat = time.monotonic() + beat_s * random.uniform(0.8, 1.0)
            self.count("agents ready")
            delay = 1.0
            while True:
                timeout_s = wait_s * random.uniform(0.9, 1.0)
                body = {"since": state["version"], "timeout_s": timeout_s}
                if self.ahead:  # as the agent does now: 204 when nothing changed
                    body["unchanged_ok"] = True
                if time.monotonic() + (timeout_s if self.ahead else 0.0) >= next_beat:
                    body["heartbeat"] = heartbeat(uuid)
                    self.beat_gaps.append(time.monotonic() - beaten)
                    beaten = time.monotonic()
                    next_beat = beaten + beat_s * random.uniform(0.8, 1.0)
                    self.count("waits with a heartbeat")
                read = httpx.Timeout(timeout_s + WAIT_GRACE_S, connect=10.0)
                answer = await self._call(http, "wait/", body, token, timeout=read)
                now = time.time()
                if answer is None:
                    await asyncio.sleep(delay * random.uniform(0.5, 1.0))
                    delay = min(delay * 2, 10.0)
                    continue
                delay = 1.0
                if answer is UNCHANGED:
                    self.count("answered", "unchanged (204)")
                    continue
                self.count("answered", "woken" * (answer["version"] != state["version"]))
                state = answer
                for session in answer["sessions"]:
                    self.seen.setdefault(session["session_id"], now)


def oldest_heartbeat_s(silent: set[str]) -> float:
    """The age of the oldest last heartbeat among the live simulated nodes."""
    nodes = Node.objects.filter(hostname__startswith=PREFIX).exclude(hostname__in=silent)
    oldest = nodes.aggregate(oldest=Min("last_heartbeat"))["oldest"]
    return time.time() - oldest.timestamp() if oldest else 0.0


class Placements:
    """Sessions placed one at a time by the real cycle, stopped once their agent has them."""

    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet
        self.user = get_user_model().objects.create_user(PREFIX + "student")
        give_thesis_grant(self.user)
        self.profile = bench_profile()
        self.latencies: list[float] = []
        self.missed: list[str] = []
        self.pending: tuple[Session, float] | None = None

    def submit(self) -> None:
        request = check_submit(self.user, self.profile.pk, "thesis", None)
        self.pending = (do_submit(self.user, request), time.monotonic())

    def check(self) -> None:
        if self.pending is None:
            return
        session, since = self.pending  # time.monotonic() of the submit
        seen = self.fleet.seen.get(session.pk)
        if seen is None and time.monotonic() - since < PLACE_TIMEOUT_S:
            return
        session.refresh_from_db()
        if seen is not None and session.placed_at is not None:
            self.latencies.append(seen - session.placed_at.timestamp())
        else:
            self.missed.append(f"session {session.pk} {session.state}, not seen by its agent")
        if session.state not in ("ENDED", "CANCELLED", "FAILED", "LOST", "EXPIRED"):
            do_stop(self.user, session)
        self.pending = None


def measure(stack: Stack, args: argparse.Namespace, access_log: Path) -> list[str]:
    """Run the fleet, measure, and return the summary lines."""
    hosts = [f"{PREFIX}{n:04d}" for n in range(args.agents)]
    joins = [(host, do_create_join_token(host, actor="bench")) for host in hosts]
    fleet = Fleet(stack.url, joins, args.ramp, args.beat_ahead)
    placements = Placements(fleet)
    pids = {name: stack.processes[name].pid for name in ("portal", "worker")}
    pids["bench (the agents)"] = os.getpid()
    began = time.monotonic()
    fleet.thread.start()
    try:
        deadline = began + args.ramp + 600
        while fleet.snapshot()["agents ready"] < args.agents:
            lost = fleet.snapshot()["agents not registered"]
            if lost or time.monotonic() > deadline:
                raise RuntimeError(f"{lost} agents could not register: {fleet.snapshot()}")
            time.sleep(0.5)
        print(f"all agents ready after {time.monotonic() - began:.1f} s; warm-up", flush=True)
        time.sleep(settings.AGENT_WAIT_S)  # one wait period of warm-up
        ages: list[float] = []
        start, counts0, gaps0 = time.monotonic(), fleet.snapshot(), len(fleet.beat_gaps)
        cpu0 = {name: cpu_s(pid) for name, pid in pids.items()}
        log0 = access_log.stat().st_size
        due = [start + (i + 0.5) * args.window / args.placements for i in range(args.placements)]
        next_sample = start
        while True:
            now = time.monotonic()
            if now >= next_sample:
                ages.append(oldest_heartbeat_s(set()))
                next_sample += SAMPLE_S
            placements.check()
            if placements.pending is None and due and due[0] <= now < start + args.window:
                due.pop(0)
                placements.submit()
            if now >= start + args.window and placements.pending is None:
                break  # placements not yet begun are dropped
            time.sleep(0.02)
        elapsed = time.monotonic() - start
        counts, gaps = fleet.snapshot() - counts0, sorted(fleet.beat_gaps[gaps0:]) or [math.nan]
        cpu = {name: (cpu_s(pid) - cpu0[name]) / elapsed * 100 for name, pid in pids.items()}
        with open(access_log, "rb") as f:
            f.seek(log0)
            logged = f.read().count(b"\n")
        load = ", ".join(f"{n:.1f}" for n in os.getloadavg())
        lines = [
            f"idle agents: {args.agents}; portal requests: {counts['requests'] / elapsed:.1f}/s "
            f"({counts['wait/']} waits asked, {counts['waits with a heartbeat']} with a heartbeat "
            f"inside; {counts['answered']} answered, {counts['woken']} of them early by a change; "
            f"daphne's access log: {logged / elapsed:.1f}/s); window {elapsed:.1f} s",
            "CPU in the window, % of one core: "
            + ", ".join(f"{name} {value:.1f}%" for name, value in cpu.items())
            + f"; load average at its end {load}",
            f"max heartbeat age of live nodes {max(ages):.1f} s, mean of {len(ages)} samples "
            f"{statistics.mean(ages):.1f} s (threshold {settings.NODE_HEARTBEAT_TIMEOUT_S:g} s); "
            f"an agent's heartbeats were p50 {statistics.median(gaps):.1f} s, p95 "
            f"{percentile(gaps, 0.95):.1f} s, max {gaps[-1]:.1f} s apart",
        ]
        errors = {k: v for k, v in counts.items() if " " in k and k.split()[0].endswith("/")}
        lines.append(f"errors in the window: {errors or 'none'}")
        times = sorted(placements.latencies) or [math.nan]
        lines.append(
            f"wake latency (placed_at -> agent has it) over {len(placements.latencies)} of "
            f"{args.placements} placements: p50 {statistics.median(times):.3f} s, p95 "
            f"{percentile(times, 0.95):.3f} s, max {times[-1]:.3f} s"
        )
        lines += [f"MISSED: {m}" for m in placements.missed]
        print(*lines, sep="\n", flush=True)
        if args.silence:
            lines.append(silence(fleet, hosts))
        return lines
    finally:
        fleet.stop()


def silence(fleet: Fleet, hosts: list[str]) -> str:
    """Agent 0 goes silent: seconds from its last heartbeat until its node is unhealthy."""
    assert fleet.loop is not None
    fleet.loop.call_soon_threadsafe(fleet.tasks[0].cancel)  # its open wait is dropped
    silenced = time.time()
    time.sleep(1.0)  # a heartbeat the portal was recording when the agent stopped lands
    node = Node.objects.get(hostname=hosts[0])
    assert node.last_heartbeat is not None
    last = node.last_heartbeat.timestamp()
    if not node.is_healthy():
        return f"silence NOT MEASURED: node already unhealthy ({silenced - last:.1f} s silent)"
    ages = [0.0]
    deadline = time.monotonic() + settings.NODE_HEARTBEAT_TIMEOUT_S + 60
    while node.is_healthy() and time.monotonic() < deadline:
        ages.append(oldest_heartbeat_s({hosts[0]}))
        time.sleep(0.25)
        node.refresh_from_db()
    if node.is_healthy():
        return f"silent node {node.hostname} STILL HEALTHY after {time.time() - silenced:.1f} s"
    return (
        f"silent node noticed after {time.time() - last:.1f} s of silence (its agent stopped "
        f"{silenced - last:.1f} s after its last heartbeat; threshold "
        f"{settings.NODE_HEARTBEAT_TIMEOUT_S:g} s); meanwhile max heartbeat age of the "
        f"live nodes {max(ages):.1f} s"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=1000)
    parser.add_argument("--window", type=float, default=60.0, help="seconds measured")
    parser.add_argument("--placements", type=int, default=20)
    parser.add_argument("--ramp", type=float, default=25.0, help="seconds registrations span")
    parser.add_argument("--no-silence", dest="silence", action="store_false")
    before = (
        "agents as before 176812d: a heartbeat only if due when a wait starts, and the whole "
        "desired state at every wait's end (today's agent: the heartbeat that falls due "
        "during a wait goes with it, and 204 when nothing changed)"
    )
    parser.add_argument("--as-before", dest="beat_ahead", action="store_false", help=before)
    args = parser.parse_args()
    logging.getLogger("httpx").setLevel(logging.WARNING)
    if connection.vendor != "postgresql" or settings.EMBEDDED:
        raise SystemExit("the benchmark needs PostgreSQL and Redis: set DATABASE_URL, REDIS_URL")
    hard, limit = resource.getrlimit(resource.RLIMIT_NOFILE)[1], max(4096, 2 * args.agents + 9)
    limit = limit if hard == resource.RLIM_INFINITY else min(hard, limit)
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))  # daphne inherits it
    for url in (settings.CELERY_BROKER_URL, settings.LOCK_REDIS_URL):
        redis.Redis.from_url(url).flushdb()
    started = time.monotonic()
    original = connection.settings_dict["NAME"]
    connection.settings_dict["TEST"]["NAME"] = f"{original}_bench_fleet"
    connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    load = ", ".join(f"{n:.1f}" for n in os.getloadavg())
    print(
        f"bench_fleet: {args.agents} agents"
        f"{' (--as-before)' * (not args.beat_ahead)}, AGENT_WAIT_S "
        f"{settings.AGENT_WAIT_S:g}, AGENT_HEARTBEAT_INTERVAL_S "
        f"{settings.AGENT_HEARTBEAT_INTERVAL_S:g}, open files {limit}; {os.cpu_count()} CPUs, "
        f"load average {load}",
        flush=True,
    )
    failed = True
    try:
        with tempfile.TemporaryDirectory(prefix="bench-fleet-") as tmp:
            # The portal's defaults (the stack's env shortens the agents' local poll only).
            poll = {"DESKPOOL_AGENT_POLL_INTERVAL_S": "1.0"}
            db_url = database_url_of(connection.settings_dict)
            stack = Stack(Path(tmp), db_url, settings.REDIS_URL, PREFIX, extra_env=poll)
            access_log = stack.logs / "access.log"
            try:
                # daphne as Stack.start_portal starts it, with an access log; the worker.
                daphne = [*ASGI_WORKER, "-b", "127.0.0.1", "-p", str(stack.port)]
                stack._spawn("portal", [*daphne, "--access-log", str(access_log), ASGI])
                stack.start_worker()
                stack.wait_http("/login/")
                lines = measure(stack, args, access_log)
                print("--- summary ---", *lines, sep="\n")
                failed = any(word in " ".join(lines) for word in ("MISSED", "STILL", "NOT"))
            finally:
                stack.close()
                shutil.rmtree(LOGS, ignore_errors=True)
                shutil.copytree(stack.logs, LOGS)
                print(f"the stack's logs: {LOGS.relative_to(ROOT)}/")
    finally:
        connection.close()
        connection.creation.destroy_test_db(original, verbosity=0)
    print(f"({time.monotonic() - started:.0f} s for the whole run)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
