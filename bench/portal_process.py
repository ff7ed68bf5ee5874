"""A portal process for the benchmarks: a database of its own, the ASGI worker, a user and a
RUNNING session on a desktop of the bench's (``bench.data_plane``)."""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import psycopg

from bench.storm import spawn

PASSWORD = "bench-12"  # the session's VNC secret


def fresh_database(env: dict[str, str], suffix: str) -> dict[str, str]:
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
    user = get_user_model().objects.create_user("planebench")
    node = Node.objects.create(hostname="planebench-node", address="127.0.0.1")
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
