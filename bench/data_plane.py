"""``python -m bench.data_plane``: what desktop viewers cost the portal, through the node's
gateway (the data plane) and through the portal's old relay, side by side (issue 34).

Everything runs on this machine, from the repository root, on the PostgreSQL server and
Redis of ``DATABASE_URL`` and ``REDIS_URL``, in databases of its own (created, migrated and
dropped at the end):

- **the desktops:** one deskpool/tiny container on the real Docker engine running
  ``tests/integration/hostile_desktop.py`` paced (``--rate-kib`` KiB/s per viewer in
  ``--chunk-kib`` KiB messages, as websockify's at most 64 KiB): it logs in as websockify
  does, then repaints without end. It is synthetic on purpose: every viewer gets the same
  bytes at the same pace, whichever way they travel;
- **the portal** of this tree (``python -m portal.server.daphne_worker``): a user signed in
  (a login session), polled for the control plane's latency;
- **the gateway** of this tree (``python -m nodeagent.gateway``), given the node's state
  on its standard input as the agent gives it; the bench signs the tickets with the key it
  gave it (the portal's ticket request, one POST per open, is outside the streaming window);
- **the relay:** the portal at ``--relay-commit`` (the last one with the VNC relay, in a git
  worktree, on a database migrated by that tree), as it ran before the gateway.

For each N of ``--viewers``: N browsers log in (RFB, security type None) and read for
``--seconds``; the bench reads the CPU seconds of every process from ``/proc`` and the bytes
the browsers got. It prints, per N, the portal's CPU s/s with the viewers on the gateway
against none, the gateway's CPU per viewer and per MB, and the relay's on the same client.
Then the control plane's p50/p95 (``GET /api/v1/sessions/`` and the home page, one request
after the other) without viewers and with the largest N streaming through the gateway.
With ``--storm``, last, ``python -m bench.storm --outside`` (its own demo stack) alone and
then with ``--storm-viewers`` (20) viewers streaming through the gateway meanwhile: the
storm's summary lines each time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import docker
import websockets
from websockets.typing import Origin

from bench.cpu import cpu_s
from bench.portal_process import free_port, fresh_database, start_daphne, stop, wait_up
from bench.storm import drop_database
from nodeagent.gateway.messages import GatewaySession, GatewayState
from nodeagent.gateway.tickets import Ticket, key_bytes, new_ticket_id, sign_ticket
from nodeagent.protocol_gateway import GatewayKey

ROOT = Path(__file__).resolve().parent.parent
HOSTILE = ROOT / "tests" / "integration" / "hostile_desktop.py"
IMAGE = "deskpool/tiny:latest"
MIB = 1024 * 1024
ORIGIN = "http://bench.invalid"
KEY_TEXT = "b" * 43  # the bench's ticket key (base64url of 32 bytes)
SCREENS_PER_SESSION = 4  # the gateway caps screens per desktop: spread the viewers
PASSWORD = "bench-12"
# The last commit whose portal carries the VNC relay (portal/live/desktop_relay.py).
RELAY_COMMIT = "cc61db2"


@dataclass
class Run:
    viewers: int
    seconds: float
    received: int  # bytes the browsers got past their handshakes
    cpu: dict[str, float]  # role -> CPU seconds spent in the window


# -- the parts -------------------------------------------------------------------------------


def start_desktop(rate: int, chunk: int) -> tuple[object, int]:
    client = docker.from_env()
    container = client.containers.run(
        IMAGE,
        entrypoint=["python3", "-u", "/hostile.py"],
        command=[],
        detach=True,
        name=f"deskpool-bench-data-plane-{os.getpid()}",
        environment={"DESKTOP_RATE_BPS": str(rate), "DESKTOP_CHUNK": str(chunk)},
        volumes={str(HOSTILE): {"bind": "/hostile.py", "mode": "ro"}},
        ports={"6080/tcp": ("127.0.0.1", None)},
    )
    container.reload()
    port = int(container.attrs["NetworkSettings"]["Ports"]["6080/tcp"][0]["HostPort"])
    deadline = time.monotonic() + 20
    while b"sent screen=" not in container.logs(tail=1):
        if time.monotonic() > deadline:
            raise SystemExit("the bench's desktop did not start")
        time.sleep(0.1)
    return container, port


class Gateway:
    """``python -m nodeagent.gateway`` with the bench's state; its events are read and
    counted (an unread pipe would stall it)."""

    def __init__(self, desktop_port: int, sessions: int, log: Path) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "nodeagent.gateway", "--bind", "127.0.0.1", "--port", "0"],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log.open("ab"),
        )
        assert self.process.stdout is not None and self.process.stdin is not None
        self.port = int(json.loads(self.process.stdout.readline())["listening"])
        self.events = 0
        threading.Thread(target=self._read, daemon=True).start()
        state = GatewayState(
            node_id=1,
            keys=[GatewayKey(kid=1, key=KEY_TEXT)],
            origins=[ORIGIN],
            sessions=[
                GatewaySession(session_id=n, host="127.0.0.1", port=desktop_port, password=PASSWORD)
                for n in range(1, sessions + 1)
            ],
        )
        self.process.stdin.write(state.model_dump_json().encode() + b"\n")
        self.process.stdin.flush()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for _line in self.process.stdout:
            self.events += 1

    def ticket(self, session_id: int) -> str:
        now = int(time.time())
        claims = Ticket(
            v=1, kid=1, nid=1, sid=session_id, uid=1, sin="bench", pur="screen", path="",
            iat=now, exp=now + 30, jti=new_ticket_id(),
        )  # fmt: skip
        return sign_ticket(claims, key_bytes(KEY_TEXT))

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()


def session_in(
    tree: Path, env: dict[str, str], desktop_port: int, module: str = "bench.portal_process"
) -> tuple[int, str]:
    """Migrate the database of ``env`` with the portal of ``tree``, then a signed-in user with
    a RUNNING session on the bench's desktop (``module``'s make_session: the relay's tree has
    it in bench.relay_memory): its id and the login session's cookie."""
    code = f"from {module} import make_session; print(*make_session({desktop_port}))"
    made = subprocess.run(
        [sys.executable, "-c", code], cwd=tree, env=env, check=True, capture_output=True,
        text=True,
    )  # fmt: skip
    session_id, cookie = made.stdout.split()[-2:]
    return int(session_id), cookie


def relay_portal(
    commit: str, env: dict[str, str], env_before: dict[str, str], desktop_port: int, workdir: Path
) -> tuple[subprocess.Popen, str, int, str, dict[str, str]]:
    """The portal at ``commit`` (a worktree, a database of its own, its migrations) with one
    RUNNING session on the bench's desktop: (process, url, session id, cookie, env)."""
    tree = workdir / "relay-tree"
    subprocess.run(
        ["git", "worktree", "add", "--detach", str(tree), commit],
        cwd=ROOT, check=True, capture_output=True,
    )  # fmt: skip
    relay_env = fresh_database(env_before, "bench_data_plane_relay")
    for shared in ("DESKPOOL_VAR_DIR", "PYTHONUNBUFFERED", "DJANGO_SETTINGS_MODULE"):
        relay_env[shared] = env[shared]
    relay_env["PYTHONPATH"] = str(tree)
    session_id, cookie = session_in(tree, relay_env, desktop_port, "bench.relay_memory")
    port = free_port()
    log = workdir / "relay-portal.log"
    argv = [sys.executable, "-m", "portal.server.daphne_worker", "-b", "127.0.0.1", "-p",
            str(port), "portal.asgi:application"]  # fmt: skip
    process = subprocess.Popen(
        argv, cwd=tree, env=relay_env, stdout=log.open("ab"), stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    wait_up(process, url, log)
    return process, url, session_id, cookie, relay_env


def main_portal(env: dict[str, str], desktop_port: int, workdir: Path):  # type: ignore[no-untyped-def]
    """This tree's portal with one signed-in user (and a RUNNING session to list)."""
    _session_id, cookie = session_in(ROOT, env, desktop_port)
    port = free_port()
    log = workdir / "portal.log"
    process = start_daphne(env, port, log)
    url = f"http://127.0.0.1:{port}"
    wait_up(process, url, log)
    return process, url, cookie


# -- the browsers ----------------------------------------------------------------------------


async def rfb_log_in(browser: websockets.ClientConnection) -> None:
    """The browser's part of the handshake (security type None), then ClientInit."""
    await browser.send(await browser.recv())
    await browser.recv()
    await browser.send(bytes([1]))
    await browser.recv()
    await browser.send(b"\x01")


async def read_for(browser: websockets.ClientConnection, until: list[float]) -> int:
    """Read until the time in ``until[0]`` (which may be moved while reading); the bytes."""
    received = 0
    try:
        while (left := until[0] - time.monotonic()) > 0:
            try:
                async with asyncio.timeout(min(left, 1.0)):
                    received += len(await browser.recv())
            except TimeoutError:
                continue
    except websockets.ConnectionClosed:
        pass
    return received


async def gateway_viewer(gateway: Gateway, session_id: int, ready: asyncio.Event,
                         until: list[float]) -> int:  # fmt: skip
    async with websockets.connect(
        f"ws://127.0.0.1:{gateway.port}/screen", origin=Origin(ORIGIN), max_size=None,
        open_timeout=30,
    ) as browser:  # fmt: skip
        await browser.send(gateway.ticket(session_id))
        await rfb_log_in(browser)
        await ready.wait()
        return await read_for(browser, until)


async def relay_viewer(url: str, session_id: int, cookie: str, ready: asyncio.Event,
                       until: list[float]) -> int:  # fmt: skip
    async with websockets.connect(
        f"{url.replace('http://', 'ws://')}/ws/desktop/{session_id}/", origin=Origin(url),
        additional_headers={"Cookie": f"sessionid={cookie}"}, max_size=None, open_timeout=30,
    ) as browser:  # fmt: skip
        await rfb_log_in(browser)
        await ready.wait()
        return await read_for(browser, until)


async def stream(viewers: list, seconds: float, pids: dict[str, int]) -> Run:  # type: ignore[type-arg]
    """Open every viewer, then read for ``seconds`` while the CPU of ``pids`` is counted."""
    ready, until = asyncio.Event(), [0.0]
    tasks = [asyncio.create_task(open_(ready, until)) for open_ in viewers]
    await asyncio.sleep(1.0 + 0.05 * len(viewers))  # every handshake done
    before = {role: cpu_s(pid) for role, pid in pids.items()}
    started = time.monotonic()
    until[0] = started + seconds
    ready.set()
    received = sum(await asyncio.gather(*tasks))
    elapsed = time.monotonic() - started
    cpu = {role: cpu_s(pid) - before[role] for role, pid in pids.items()}
    return Run(len(viewers), elapsed, received, cpu)


# -- the control plane -----------------------------------------------------------------------


def probe(url: str, cookie: str, seconds: float) -> dict[str, list[float]]:
    """GET /api/v1/sessions/ and / one after the other for ``seconds``: their latencies."""
    found: dict[str, list[float]] = {"/api/v1/sessions/": [], "/": []}
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for path, latencies in found.items():
            request = urllib.request.Request(url + path, headers={"Cookie": f"sessionid={cookie}"})
            started = time.monotonic()
            with urllib.request.urlopen(request, timeout=30) as answer:
                answer.read()
            latencies.append(time.monotonic() - started)
    return found


def pct(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))] * 1000


def probe_line(what: str, found: dict[str, list[float]]) -> str:
    parts = [
        f"{path} p50 {pct(v, 0.5):.1f} ms p95 {pct(v, 0.95):.1f} ms (n={len(v)})"
        for path, v in found.items()
    ]
    return f"  control plane, {what}: " + "; ".join(parts)


# -- the outside storm beside the viewers ----------------------------------------------------


def run_storm(env: dict[str, str]) -> list[str]:
    """``python -m bench.storm --outside`` (its own demo stack and database): its summary."""
    done = subprocess.run(
        [sys.executable, "-m", "bench.storm", "--outside"], cwd=ROOT, env=env,
        capture_output=True, text=True,
    )  # fmt: skip
    return [f"    {line}" for line in done.stdout.strip().splitlines()[-12:]]


async def storm_beside(args: argparse.Namespace, gateway: Gateway) -> list[str]:
    """The outside storm alone, then with ``--storm-viewers`` streaming through the gateway."""
    lines = ["  the outside storm, alone:"]
    lines += await asyncio.to_thread(run_storm, args.env_before)
    ready, until = asyncio.Event(), [time.monotonic() + 3600]
    viewers = [
        asyncio.create_task(gateway_viewer(gateway, 1 + i // SCREENS_PER_SESSION, ready, until))
        for i in range(args.storm_viewers)
    ]
    await asyncio.sleep(1.0 + 0.05 * args.storm_viewers)
    ready.set()
    lines.append(f"  the outside storm, {args.storm_viewers} viewers streaming on the gateway:")
    lines += await asyncio.to_thread(run_storm, args.env_before)
    until[0] = time.monotonic()
    received = sum(await asyncio.gather(*viewers))
    lines.append(f"    (the viewers got {received / MIB:.0f} MiB meanwhile)")
    return lines


# -- the run ---------------------------------------------------------------------------------


def run_line(way: str, run: Run, role: str, idle_portal_cps: float) -> str:
    mb = run.received / MIB
    per_s = {r: c / run.seconds for r, c in run.cpu.items()}
    line = (
        f"  {way:8} N={run.viewers:3}: {mb / run.seconds:7.1f} MiB/s to the browsers; "
        f"{role} {per_s[role] * 1000:6.1f} ms CPU/s = "
        f"{per_s[role] * 1000 / max(run.viewers, 1):5.2f} ms/s per viewer, "
        f"{run.cpu[role] * 1000 / max(mb, 1e-9):5.2f} ms per MiB"
    )
    if "portal" in per_s and role != "portal":
        line += (
            f"; portal {per_s['portal'] * 1000:5.1f} ms CPU/s (idle {idle_portal_cps * 1000:.1f})"
        )
    return line


async def measure(args: argparse.Namespace, env: dict[str, str], workdir: Path) -> list[str]:
    lines: list[str] = []
    container, desktop_port = start_desktop(args.rate_kib * 1024, args.chunk_kib * 1024)
    portal = relay = gateway = None
    try:
        portal, url, cookie = main_portal(env, desktop_port, workdir)
        relay, relay_url, relay_session, relay_cookie, relay_env = relay_portal(
            args.relay_commit, env, args.env_before, desktop_port, workdir
        )
        most = max(args.viewers)
        sessions = -(-most // SCREENS_PER_SESSION)
        gateway = Gateway(desktop_port, sessions, workdir / "gateway.log")
        idle = await stream([], args.seconds, {"portal": portal.pid})
        idle_cps = idle.cpu["portal"] / idle.seconds
        lines.append(f"  idle: portal {idle_cps * 1000:.1f} ms CPU/s with no viewer")
        for n in args.viewers:
            gw = [
                lambda r, u, s=1 + i // SCREENS_PER_SESSION: gateway_viewer(gateway, s, r, u)
                for i in range(n)
            ]
            run = await stream(gw, args.seconds, {"gateway": gateway.process.pid,
                                                  "portal": portal.pid})  # fmt: skip
            lines.append(run_line("gateway", run, "gateway", idle_cps))
            rl = [
                lambda r, u: relay_viewer(relay_url, relay_session, relay_cookie, r, u)
                for _ in range(n)
            ]
            run = await stream(rl, args.seconds, {"relay": relay.pid})
            lines.append(run_line("relay", run, "relay", idle_cps))
            print(*lines[-2:], sep="\n", flush=True)
        quiet = await asyncio.to_thread(probe, url, cookie, args.seconds)
        lines.append(probe_line("no viewers", quiet))
        ready, until = asyncio.Event(), [time.monotonic() + args.seconds + 5]
        viewers = [
            asyncio.create_task(gateway_viewer(gateway, 1 + i // SCREENS_PER_SESSION, ready,
                                               until))
            for i in range(most)
        ]  # fmt: skip
        await asyncio.sleep(1.0 + 0.05 * most)
        ready.set()
        busy = await asyncio.to_thread(probe, url, cookie, args.seconds)
        await asyncio.gather(*viewers)
        lines.append(probe_line(f"{most} viewers on the gateway", busy))
        if args.storm:
            lines += await storm_beside(args, gateway)
        drop_database(relay_env)
    finally:
        for process in (portal, relay):
            if process is not None:
                stop(process)
        if gateway is not None:
            gateway.close()
        container.remove(force=True)  # type: ignore[attr-defined]
        subprocess.run(["git", "worktree", "remove", "--force", str(workdir / "relay-tree")],
                       cwd=ROOT, capture_output=True)  # fmt: skip
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--viewers", type=lambda s: [int(n) for n in s.split(",")],
                        default=[1, 10, 20, 40])  # fmt: skip
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rate-kib", type=int, default=512, help="per viewer, KiB/s")
    parser.add_argument("--chunk-kib", type=int, default=64, help="per message")
    parser.add_argument("--relay-commit", default=RELAY_COMMIT)
    parser.add_argument("--storm", action="store_true", help="also bench.storm --outside")
    parser.add_argument("--storm-viewers", type=int, default=20)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="bench-data-plane-"))
    args.env_before = dict(os.environ)
    env = fresh_database(dict(os.environ), "bench_data_plane")
    env["DESKPOOL_VAR_DIR"] = str(workdir / "var")
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    load = ", ".join(f"{n:.1f}" for n in os.getloadavg())
    print(
        f"bench.data_plane: {args.viewers} viewers, {args.seconds:g} s each, "
        f"{args.rate_kib} KiB/s per viewer in {args.chunk_kib} KiB messages; relay of "
        f"{args.relay_commit}; {os.cpu_count()} CPUs, load average {load}",
        flush=True,
    )
    try:
        lines = asyncio.run(measure(args, env, workdir))
    finally:
        drop_database(env)
        shutil.rmtree(workdir, ignore_errors=True)
    print("--- summary ---", *lines, sep="\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
