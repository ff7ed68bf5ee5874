"""``python -m bench.relay_memory``: the desktop relay's memory under a hostile desktop.

A desktop is the student's to change (docs/security.md, "The relay holds bounded memory"):
this benchmark plays one that replaced websockify. It starts

- a fake desktop: a websockets server on 127.0.0.1 that does the VNC server's part of the RFB
  handshake with VNC authentication (what ``portal.live.desktop_relay.log_in_upstream`` expects;
  any answer to the challenge is accepted), then, after the browser's ClientInit, sends ONE
  message of ``--message-mib`` MiB (default 512);
- one real daphne process of the portal (as ``tests/integration/stack.py`` starts it), on
  the PostgreSQL server and Redis of ``DATABASE_URL`` and ``REDIS_URL``, in a database of its
  own (``<name>_bench_relay_memory``, created, migrated and dropped at the end) and a
  ``DESKPOOL_VAR_DIR`` (and so a secret key) shared with this process;

makes a user and a RUNNING session whose node address and desktop port are the fake
desktop's, signs the user in (a login session, as the login form makes), and opens the relay
``/ws/desktop/<id>/`` as a browser would (the session cookie, the portal's own Origin), does
the browser's part of the handshake, and reads until the relay closes. A first relay carries
a small message (``--warm-kib``) so that the baseline is that of a portal that has relayed.

daphne's memory is read from ``/proc/<pid>/status``: the resident size (VmRSS) before, every
``--sample-ms`` during and ``--settle`` seconds after; the peak is VmHWM, reset after the
warm-up (``/proc/<pid>/clear_refs``) so that it is the big message's. Prints the baseline,
the peak, the resident size after, the close code the browser got (or that the relay stayed
open and passed the message on), and the seconds from the ClientInit to the close. Run it from
the repository root with nothing else loading the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import websockets
from websockets.asyncio.server import ServerConnection, serve
from websockets.typing import Origin

from bench.storm import drop_database, spawn
from nodeagent.readiness import CHALLENGE_LENGTH, SECURITY_NONE, SECURITY_VNC_AUTH

ROOT = Path(__file__).resolve().parent.parent
MIB = 1024 * 1024
PASSWORD = "bench-12"  # the session's VNC secret (the fake desktop takes any answer)


# -- the environment -----------------------------------------------------------------------


def fresh_database(env: dict[str, str], suffix: str = "bench_relay_memory") -> dict[str, str]:
    """The environment with DATABASE_URL naming a new, empty database ``<name>_<suffix>``."""
    if not env.get("DATABASE_URL", "").startswith("postgres") or not env.get("REDIS_URL"):
        raise SystemExit("set DATABASE_URL (PostgreSQL) and REDIS_URL")
    server, _, name = env["DATABASE_URL"].rstrip("/").rpartition("/")
    database = f"{name}_{suffix}"
    with psycopg.connect(f"{server}/postgres", autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{database}"')
    return {**env, "DATABASE_URL": f"{server}/{database}"}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_daphne(env: dict[str, str], port: int, log: Path) -> subprocess.Popen:
    argv = ["portal.server.daphne_worker", "-b", "127.0.0.1", "-p", str(port)]
    return spawn([*argv, "portal.asgi:application"], env, log)


def wait_up(daphne: subprocess.Popen, url: str, log: Path, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if daphne.poll() is not None:
            raise SystemExit(f"daphne exited:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url + "/login/", timeout=2):
                return
        except OSError:
            time.sleep(0.3)
    raise SystemExit(f"daphne did not answer /login/ in {timeout:.0f} s")


def stop(daphne: subprocess.Popen) -> None:
    daphne.send_signal(signal.SIGTERM)
    try:
        daphne.wait(30)
    except subprocess.TimeoutExpired:
        os.killpg(daphne.pid, signal.SIGKILL)
        daphne.wait()


# -- the database: a user, a RUNNING session on the fake desktop, a login session ----------


def make_session(desktop_port: int) -> tuple[int, str]:
    """Migrate, then a user and a RUNNING session whose desktop is 127.0.0.1:``desktop_port``;
    returns its id and the user's ``sessionid`` cookie value. Django is set up here, on the
    environment prepared before."""
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import connection

    # bench.class_start sets Django up when imported: after the environment is in place.
    from bench.class_start import bench_profile, web_session
    from scheduling.choices import SessionState
    from scheduling.models import Node, Session

    call_command("migrate", "--noinput", verbosity=0)
    logging.getLogger("websockets").setLevel(logging.WARNING)  # the fake desktop's lines
    user = get_user_model().objects.create_user("relaybench")
    node = Node.objects.create(hostname="relaybench-node", address="127.0.0.1")
    session = Session.objects.create(
        user=user,
        profile=bench_profile(),
        purpose="hobby",
        state=SessionState.RUNNING,
        node=node,
        desktop_port=desktop_port,
        vnc_password=PASSWORD,
    )
    cookie = web_session(user)
    connection.close()  # this thread's: the database is dropped at the end
    return session.pk, cookie


# -- daphne's memory -------------------------------------------------------------------------


def memory_kib(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM of ``pid`` in KiB."""
    found = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            found[key] = int(value.split()[0])
    return found


def reset_peak(pid: int) -> bool:
    """Set VmHWM back to VmRSS (Linux 4.0 and later); False where not allowed."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    except OSError:
        return False
    return True


class Sampler(threading.Thread):
    """Reads VmRSS every ``interval`` seconds until stopped; keeps the largest."""

    def __init__(self, pid: int, interval: float) -> None:
        super().__init__(daemon=True)
        self.pid, self.interval = pid, interval
        self.largest = 0
        self.samples = 0
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            self.largest = max(self.largest, memory_kib(self.pid)["VmRSS"])
            self.samples += 1
            self.done.wait(self.interval)


# -- the fake desktop and the browser --------------------------------------------------------


@dataclass
class FakeDesktop:
    """websockify's part up to a successful VNC login; then, after the ClientInit, one
    message of the next size in ``sizes`` (one per connection)."""

    sizes: list[int]
    sent: list[str] = field(default_factory=list)  # per connection: how the sending ended

    async def handler(self, connection: ServerConnection) -> None:
        message = b"x" * self.sizes.pop(0)  # made before: not part of the timing
        await connection.send(b"RFB 003.008\n")
        await connection.recv()  # the relay's version
        await connection.send(bytes([1, SECURITY_VNC_AUTH]))
        await connection.recv()  # its choice
        await connection.send(os.urandom(CHALLENGE_LENGTH))
        await connection.recv()  # its answer: any is taken
        await connection.send(struct.pack(">I", 0))  # SecurityResult: OK
        await connection.recv()  # the browser's ClientInit, relayed
        try:
            await connection.send(message)
            self.sent.append("sent whole")
        except websockets.ConnectionClosed as closed:
            self.sent.append(f"cut off by the relay ({closed.rcvd.code if closed.rcvd else '-'})")
        await connection.wait_closed()


@dataclass
class BrowserEnd:
    code: int | None  # the close code the browser got; None: still open
    received: int  # bytes of messages past the handshake
    seconds: float  # from the ClientInit to the close (or to the whole message)


async def browser(url: str, session_id: int, cookie: str, size: int, timeout: float) -> BrowserEnd:
    """The browser's socket to the relay: the handshake (type None), the ClientInit, then
    read until the relay closes or the whole message came through."""
    origin = url.replace("ws://", "http://")
    async with websockets.connect(
        f"{url}/ws/desktop/{session_id}/",
        origin=Origin(origin),
        additional_headers={"Cookie": f"sessionid={cookie}"},
        max_size=None,  # a browser takes any size
        open_timeout=30,
    ) as socket_:
        version = await socket_.recv()
        await socket_.send(version)
        await socket_.recv()  # the security types: None only
        await socket_.send(bytes([SECURITY_NONE]))
        await socket_.recv()  # SecurityResult
        await socket_.send(b"\x01")  # ClientInit (shared)
        started = time.monotonic()
        received = 0
        try:
            async with asyncio.timeout(timeout):
                while received < size:
                    received += len(await socket_.recv())
        except websockets.ConnectionClosed:
            pass
        except TimeoutError:
            print(f"  no close and not the whole message within {timeout:g} s")
        seconds = time.monotonic() - started
        return BrowserEnd(socket_.close_code, received, seconds)


# -- the run ---------------------------------------------------------------------------------


def mb(kib: int) -> str:
    return f"{kib / 1024:.0f} MB"


async def measure(
    args: argparse.Namespace, pid: int, url: str, desktop: FakeDesktop, session_id: int, cookie: str
) -> None:
    warm = await browser(url, session_id, cookie, args.warm_kib * 1024, args.timeout)
    passed = "the relay passed it on" if warm.code is None else f"closed with {warm.code}"
    print(f"warm-up:  a {args.warm_kib} KiB message, {passed} ({warm.received} B)")
    await asyncio.sleep(args.settle)
    before = memory_kib(pid)
    peak_reset = reset_peak(pid)
    sampler = Sampler(pid, args.sample_ms / 1000)
    sampler.start()
    size = args.message_mib * MIB
    end = await browser(url, session_id, cookie, size, args.timeout)
    await asyncio.sleep(args.settle)
    sampler.done.set()
    sampler.join()
    after = memory_kib(pid)
    print(f"baseline: daphne VmRSS {mb(before['VmRSS'])} (VmHWM so far {mb(before['VmHWM'])})")
    peak = "VmHWM" if peak_reset else "VmHWM (not reset: includes start-up)"
    print(
        f"during:   daphne {peak} {mb(after['VmHWM'])}, largest VmRSS sampled "
        f"{mb(sampler.largest)} ({sampler.samples} samples every {args.sample_ms} ms)"
    )
    print(f"after:    daphne VmRSS {mb(after['VmRSS'])}, {args.settle:g} s after the end")
    if end.code is None:
        outcome = f"the relay stayed open; the browser got {end.received / MIB:.0f} MiB"
    else:
        outcome = f"closed with {end.code}; the browser got {end.received} B past the handshake"
    print(f"browser:  {outcome}, {end.seconds:.2f} s after its ClientInit")
    print(f"desktop:  {desktop.sent[-1] if desktop.sent else 'never sent'}")


async def run(args: argparse.Namespace, env: dict[str, str], workdir: Path) -> None:
    desktop = FakeDesktop([args.warm_kib * 1024, args.message_mib * MIB])
    async with serve(desktop.handler, "127.0.0.1", 0, max_size=None, compression=None) as server:
        desktop_port = server.sockets[0].getsockname()[1]
        session_id, cookie = await asyncio.to_thread(make_session, desktop_port)
        port = free_port()
        log = workdir / "daphne.log"
        daphne = start_daphne(env, port, log)
        try:
            http = f"http://127.0.0.1:{port}"
            await asyncio.to_thread(wait_up, daphne, http, log)
            print(f"daphne (pid {daphne.pid}) on port {port}, the fake desktop on {desktop_port}")
            await measure(args, daphne.pid, f"ws://127.0.0.1:{port}", desktop, session_id, cookie)
        finally:
            stop(daphne)
            kept = ROOT / "test-output" / "bench-relay-memory-daphne.log"
            kept.parent.mkdir(exist_ok=True)
            shutil.copy(log, kept)
            print(f"daphne's log: {kept.relative_to(ROOT)}")


def relay_version() -> str:
    """The commit, and whether the relay's file differs from it."""
    head = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    changed = subprocess.run(
        ["git", "status", "--porcelain", "portal/live/desktop_relay.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    ).stdout.strip()
    return f"{head or 'no git'}{', portal/live/desktop_relay.py changed' if changed else ''}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--message-mib", type=int, default=512, help="the desktop's message")
    parser.add_argument("--warm-kib", type=int, default=64, help="the warm-up's message")
    parser.add_argument("--sample-ms", type=int, default=20, help="VmRSS sampling interval")
    parser.add_argument("--settle", type=float, default=2.0, help="seconds before 'after'")
    parser.add_argument("--timeout", type=float, default=120.0, help="per relay, seconds")
    args = parser.parse_args()
    started = time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix="bench-relay-memory-"))
    env = fresh_database(dict(os.environ))
    env["DESKPOOL_VAR_DIR"] = str(workdir / "var")  # daphne's and ours: one secret key
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    os.environ.clear()
    os.environ.update(env)
    load = ", ".join(f"{n:.1f}" for n in os.getloadavg())
    print(
        f"bench_relay_memory: one {args.message_mib} MiB message from the desktop through one "
        f"daphne; relay of {relay_version()}; {os.cpu_count()} CPUs, load average {load}",
        flush=True,
    )
    try:
        asyncio.run(run(args, env, workdir))
    finally:
        drop_database(env)
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"({time.monotonic() - started:.0f} s for the whole run)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
