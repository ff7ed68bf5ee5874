"""``python -m bench.open_pages [--pages 500] [--seconds 30]``: what open pages cost an idle portal.

Every open page of the portal holds a live-update socket (``/ws/updates/``), and each socket
is checked every 5 s for its sign-in and right (``portal.live.socket_guard``). Before a class
starts, hundreds of students have the page open and nothing happens: whatever the portal
spends then, it spends on the open pages alone, and a class that starts gets what is left.

This starts the portal (daphne, as ``tests/integration/stack.py`` does, with its Celery
worker), signs in ``--pages`` people (a login session each, as the login form makes), opens
one updates socket for each (one event loop, each its own connection), then, with every
socket open and nothing else to do, counts over ``--seconds`` the CPU of the portal's ASGI
process and of PostgreSQL (all its processes). Last, it signs one person out
(their login session deleted) and says how long their socket took to close (4401 expected;
the checks' bound is 5 s). Prints the figures; the database is its own
(``<name>_bench_pages``, dropped at the end). Needs PostgreSQL and Redis (``DATABASE_URL``,
``REDIS_URL``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import tempfile
import time
from pathlib import Path

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
django.setup()

from django.conf import settings  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.contrib.sessions.backends.db import SessionStore  # noqa: E402
from django.db import connection  # noqa: E402
from websockets.asyncio.client import ClientConnection, connect  # noqa: E402
from websockets.exceptions import ConnectionClosed  # noqa: E402
from websockets.typing import Origin  # noqa: E402

from bench.class_start import web_session  # noqa: E402
from bench.cpu import cpu_by_process, cpu_by_role  # noqa: E402
from tests.integration.stack import Stack, database_url_of  # noqa: E402

SETTLE_S = 6.0  # after the last socket opened: every socket's first check is behind


async def open_pages(url: str, cookies: list[str], seconds: float, out_key: str) -> None:
    ws_url = url.replace("http://", "ws://", 1) + "/ws/updates/?fragment=item"
    name = settings.SESSION_COOKIE_NAME
    sockets: list[ClientConnection] = []
    opening = time.monotonic()
    for cookie in cookies:  # one after the other: a crowd of pages, not a storm of handshakes
        sockets.append(
            await connect(
                ws_url,
                origin=Origin(url),
                additional_headers={"Cookie": f"{name}={cookie}"},
                open_timeout=60,
            )
        )
    print(f"{len(sockets)} pages open in {time.monotonic() - opening:.1f} s", flush=True)
    await asyncio.sleep(SETTLE_S)
    before = cpu_by_process()
    started = time.monotonic()
    await asyncio.sleep(seconds)
    after = cpu_by_process()
    spent = time.monotonic() - started
    used = cpu_by_role(before, after)
    portal = sum(s for role, s in used.items() if role.startswith("portal"))
    database = sum(s for role, s in used.items() if role.startswith("PostgreSQL"))
    open_now = sum(1 for s in sockets if s.close_code is None)
    print(
        f"over {spent:.0f} s with {open_now} pages open and nothing else: the portal's ASGI "
        f"{portal:.2f} CPU-s ({1000 * portal / spent:.1f} ms a second, "
        f"{1e6 * portal / spent / max(1, open_now):.0f} µs a second a page), PostgreSQL "
        f"{database:.2f} CPU-s ({1000 * database / spent:.1f} ms a second)",
        flush=True,
    )
    # One person signs out: their socket closes (4401) within the checks' bound.
    signed_out = sockets[len(sockets) // 2]
    await asyncio.to_thread(sign_out, out_key)
    gone = time.monotonic()
    try:
        await asyncio.wait_for(signed_out.wait_closed(), 30)
        print(
            f"one person signed out: their page's socket closed {time.monotonic() - gone:.2f} s "
            f"later with {signed_out.close_code}",
            flush=True,
        )
    except TimeoutError:
        print("one person signed out: their page's socket was NOT closed within 30 s")
    others = sum(1 for s in sockets if s is not signed_out and s.close_code is None)
    print(f"the other pages still open: {others} of {len(sockets) - 1}")
    for socket in sockets:
        with contextlib.suppress(ConnectionClosed):
            await socket.close()


def sign_out(session_key: str) -> None:
    """Delete the login session (what a logout does), on this thread's own connection."""
    SessionStore(session_key).delete()
    connection.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=500)
    parser.add_argument("--seconds", type=float, default=30.0)
    args = parser.parse_args()
    if connection.vendor != "postgresql":
        raise SystemExit("the benchmark needs PostgreSQL and Redis: set DATABASE_URL, REDIS_URL")
    original = connection.settings_dict["NAME"]
    connection.settings_dict["TEST"]["NAME"] = f"{original}_bench_pages"
    connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    load = ", ".join(f"{n:.1f}" for n in os.getloadavg())
    print(f"bench_open_pages: {args.pages} pages; {os.cpu_count()} CPUs, load average {load}")
    try:
        people = get_user_model()
        cookies = [
            web_session(people.objects.create_user(f"page-{n:04d}")) for n in range(args.pages)
        ]
        with tempfile.TemporaryDirectory(prefix="bench-pages-") as tmp:
            stack = Stack(Path(tmp), database_url_of(connection.settings_dict), settings.REDIS_URL)
            try:
                stack.start_portal_and_worker()
                out_key = cookies[len(cookies) // 2]
                asyncio.run(open_pages(stack.url, cookies, args.seconds, out_key))
            finally:
                stack.close()
    finally:
        connection.creation.destroy_test_db(original, verbosity=0)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
