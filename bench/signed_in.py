"""The class start as it happens: every student already signed in, all asking within a second.

``python -m bench.signed_in URL --prefix storm-si --count 200 --password P --mode token|page``

An outside client of the public portal only (HTTP and the updates WebSocket, no Django), so
that the same client measures today's tree and an old commit's stack (``bench.storm
--signed-in --at COMMIT``). The accounts ``<prefix>-s001`` … must exist with that password.

1. **Before class** (not timed): each student signs in, a few at a time, as a student who
   opened the portal earlier did.
   - ``token``: ``POST /api/v1/auth/token/`` (a phone app or a script).
   - ``page``: the sign-in form (``/login/``), then the home page, whose updates socket
     (``/ws/updates/?fragment=item``) stays open, as the browser's does.
2. **The start**: every student asks within ``--spread`` (1 s).
   - ``token``: ``POST /api/v1/sessions/``, then ``GET /api/v1/sessions/<id>/`` every
     ``--poll`` (2 s) until RUNNING.
   - ``page``: what the browser does. The home page is left (its socket closes), the form is
     posted (``POST /sessions/new/``) and the session page it redirects to is loaded; the
     page's own socket opens (``?fragment=detail&sessions=<id>``: the socket first sends
     the card as it is, the page's catch-up; an older stack's page, whose card names its
     fragment's URL, fetches it once the socket is open instead), then follows the socket.
     RUNNING is seen when the page, the catch-up or the socket first shows it. A page does
     not poll; ``--page-polls`` adds the API poll beside it (as this benchmark did before
     2026-12-07).

Prints, each as p50/p95/max: POST → answered; from the sessions' own timestamps, POST →
stored, stored → placed (with ``--dsn``, which reads ``placed_at`` from the database),
placed → RUNNING stored and RUNNING stored → seen (by poll, and on the page); and
submit → RUNNING seen, by poll and on the page. Exits 1 when a student got no desktop.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import re
import sqlite3
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import httpx
import psycopg
from websockets.asyncio.client import ClientConnection, connect
from websockets.typing import Origin

from bench.cpu import cpu_by_process, cpu_line
from bench.flame import Profiler, python_processes, summary

END_STATES = {"FAILED", "LOST", "EXPIRED", "CANCELLED", "ENDED"}
SIGN_IN_AT_ONCE = 4  # sign-ins before class, a few at a time (each is a password hash)
CSRF_FIELD = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')
SESSION_PAGE = re.compile(r"/sessions/(\d+)/")
FRAGMENT_URL = re.compile(r'data-fragment-url="([^"]+)"')
RUNNING_CARD = 'data-state="RUNNING"'  # the session card (templates/portal/_session.html)


@dataclass
class Student:
    username: str
    api: httpx.AsyncClient
    csrf: str = ""
    socket: ClientConnection | None = None
    session_id: int | None = None
    submitted: float = 0.0  # time.time() just before the POST
    answered: float | None = None
    page_loaded: float | None = None
    seen_poll: float | None = None
    seen_page: float | None = None  # page mode: the page, its catch-up or its socket
    fragment_url: str = ""
    cookies: str = ""
    created: float | None = None  # the session's own timestamps (epoch seconds)
    started: float | None = None
    placed: float | None = None
    polls: int = 0
    node: str = ""  # where it was placed (with --dsn)
    error: str = ""
    states: list[str] = field(default_factory=list)


def percentile(values: list[float], share: float) -> float:
    """Nearest-rank percentile of sorted ``values`` (share 0..1)."""
    return values[max(0, math.ceil(share * len(values)) - 1)]


def spread(values: list[float]) -> str:
    values = sorted(values)
    if not values:
        return "none"
    return (
        f"p50 {percentile(values, 0.5):.2f} s, p95 {percentile(values, 0.95):.2f} s, "
        f"max {values[-1]:.2f} s (n={len(values)})"
    )


def epoch(stamp: str | None) -> float | None:
    """An API or SQLite timestamp in epoch seconds (SQLite's have no offset: UTC)."""
    if not stamp:
        return None
    moment = datetime.fromisoformat(stamp)
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


async def sign_in(url: str, student: Student, password: str, mode: str) -> None:
    api = student.api
    if mode == "token":
        answer = await api.post(
            "/api/v1/auth/token/", json={"username": student.username, "password": password}
        )
        if answer.status_code != 200:
            raise RuntimeError(f"sign-in answered {answer.status_code}: {answer.text[:200]}")
        api.headers["Authorization"] = f"Token {answer.json()['token']}"
        return
    form = await api.get("/login/")
    token = CSRF_FIELD.search(form.text)
    if token is None:
        raise RuntimeError(f"the sign-in page has no form (status {form.status_code})")
    answer = await api.post(
        "/login/",
        data={
            "username": student.username,
            "password": password,
            "csrfmiddlewaretoken": token.group(1),
        },
        headers={"Referer": url + "/login/"},
    )
    if answer.status_code != 302:
        raise RuntimeError(f"the sign-in form answered {answer.status_code}")
    home = await api.get("/")
    token = CSRF_FIELD.search(home.text)
    if home.status_code != 200 or token is None:
        raise RuntimeError(f"the home page answered {home.status_code} without a form")
    student.csrf = token.group(1)
    student.cookies = "; ".join(f"{c.name}={c.value}" for c in api.cookies.jar)
    student.socket = await updates_socket(url, student, "item")


async def updates_socket(
    url: str, student: Student, fragment: str, sessions: tuple[int, ...] = ()
) -> ClientConnection:
    """A page's updates socket, as the page opens it (``live_socket.js``): with the session
    cards it shows (``sessions``), which the socket first sends as they are (its catch-up)."""
    asked = f"&sessions={','.join(map(str, sessions))}" if sessions else ""
    ws_url = url.replace("http://", "ws://", 1) + f"/ws/updates/?fragment={fragment}{asked}"
    return await connect(
        ws_url,
        origin=Origin(url),
        additional_headers={"Cookie": student.cookies},
        open_timeout=60,
    )


async def submit(url: str, student: Student, body: dict, mode: str) -> bool:
    student.submitted = time.time()
    if mode == "token":
        answer = await student.api.post("/api/v1/sessions/", json=body)
        student.answered = time.time()
        if answer.status_code != 201:
            student.error = f"submit answered {answer.status_code}: {answer.text[:120]}"
            return False
        student.session_id = answer.json()["id"]
        return True
    form = {k: str(v) for k, v in body.items()}
    if student.socket is not None:  # the browser leaves the home page: its socket closes
        await student.socket.close()
        student.socket = None
    answer = await student.api.post(
        "/sessions/new/",
        data={**form, "csrfmiddlewaretoken": student.csrf},
        headers={"Referer": url + "/"},
    )
    student.answered = time.time()
    found = SESSION_PAGE.search(answer.headers.get("location", ""))
    if answer.status_code != 302 or found is None:
        student.error = f"form post answered {answer.status_code}"
        return False
    student.session_id = int(found.group(1))
    page = await student.api.get(answer.headers["location"])  # the browser follows it
    student.page_loaded = time.time()
    if page.status_code != 200:
        student.error = f"session page answered {page.status_code}"
        return False
    if RUNNING_CARD in page.text:
        student.seen_page = student.page_loaded
    # An older stack's page catches up with a request of its own (its card's fragment URL);
    # today's names its card in the socket's address, and the socket sends it first.
    fragment = FRAGMENT_URL.search(page.text)
    student.fragment_url = fragment.group(1) if fragment else ""
    if student.seen_page is None:
        catch_up = () if student.fragment_url else (student.session_id,)
        student.socket = await updates_socket(url, student, "detail", catch_up)
    return True


async def poll(student: Student, poll_s: float, deadline: float) -> None:
    while time.time() < deadline and student.seen_poll is None and not student.error:
        await asyncio.sleep(poll_s)
        answer = await student.api.get(f"/api/v1/sessions/{student.session_id}/")
        student.polls += 1
        if answer.status_code != 200:
            student.error = f"poll answered {answer.status_code}"
            return
        data = answer.json()
        if not student.states or student.states[-1] != data["state"]:
            student.states.append(data["state"])
        if data["state"] == "RUNNING":
            student.seen_poll = time.time()
            student.created, student.started = epoch(data["created_at"]), epoch(data["started_at"])
        elif data["state"] in END_STATES:
            student.error = f"session ended {data['state']}"


async def listen(student: Student, deadline: float) -> None:
    """The updates socket until it reports this student's session RUNNING."""
    assert student.socket is not None
    if student.fragment_url:  # an older page catches up on what it missed by a request
        answer = await student.api.get(student.fragment_url)
        if answer.status_code == 200 and RUNNING_CARD in answer.json().get("html", ""):
            student.seen_page = time.time()
    while time.time() < deadline and student.seen_page is None and not student.error:
        try:
            raw = await asyncio.wait_for(student.socket.recv(), max(0.1, deadline - time.time()))
        except TimeoutError:
            return
        message = json.loads(raw)
        session = message.get("session") or {}
        if message.get("type") != "session.update" or session.get("id") != student.session_id:
            continue
        if session.get("state") == "RUNNING":
            student.seen_page = time.time()


async def one(url, student, body, mode, ask_at, poll_s, timeout_s, page_polls) -> None:
    await asyncio.sleep(max(0.0, ask_at - time.time()))
    try:
        if await submit(url, student, body, mode):
            deadline = time.time() + timeout_s
            waits = []
            if mode == "token" or page_polls:
                waits.append(poll(student, poll_s, deadline))
            if student.socket is not None:
                waits.append(listen(student, deadline))
            await asyncio.gather(*waits)
            if seen(student, mode) is None and not student.error:
                student.error = "no RUNNING before the timeout"
    except Exception as error:  # a student's failure is reported with the figures
        student.error = f"{type(error).__name__}: {error}"


async def storm(args: argparse.Namespace) -> list[Student]:
    at_first_ask: list[dict] = []
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    students = [
        Student(
            username=f"{args.prefix}-s{n:03d}",
            api=httpx.AsyncClient(base_url=args.url, timeout=60, limits=limits),
        )
        for n in range(1, args.count + 1)
    ]
    gate = asyncio.Semaphore(SIGN_IN_AT_ONCE)

    async def before_class(student: Student) -> None:
        async with gate:
            await sign_in(args.url, student, args.password, args.mode)

    began = time.time()
    await asyncio.gather(*(before_class(s) for s in students))
    print(f"signed in {len(students)} students ({args.mode}) in {time.time() - began:.1f} s")
    profiles = (await students[0].api.get("/api/v1/profiles/")).json()
    rows = profiles["results"] if isinstance(profiles, dict) else profiles
    found = [p["id"] for p in rows if p.get("slug") == args.profile]
    if not found:
        raise SystemExit(f"no profile {args.profile!r} among {[p.get('slug') for p in rows]}")
    profile = found[0]
    body = {"profile": profile, "purpose": args.purpose}
    if args.course:
        body["course"] = args.course
    opens = time.time() + 2.0
    print(f"every student asks within {args.spread:g} s", flush=True)
    loop = asyncio.get_running_loop()
    loop.call_later(opens - time.time(), lambda: at_first_ask.append(cpu_by_process()))
    profiler = Profiler(Path(args.flame)) if args.flame else None
    if profiler is not None:
        loop.call_later(opens - time.time(), lambda: profiler.start(python_processes()))
    client_cpu = time.process_time()
    await asyncio.gather(
        *(
            one(
                args.url,
                s,
                body,
                args.mode,
                opens + args.spread * n / len(students),
                args.poll,
                args.timeout,
                args.page_polls,
            )
            for n, s in enumerate(students)
        )
    )
    if profiler is not None:
        profiler.stop()
    before, after = (at_first_ask[0] if at_first_ask else {}), cpu_by_process()
    print(
        "from the first ask to the last RUNNING, "
        + cpu_line(
            before, after, time.time() - opens, the_students=time.process_time() - client_cpu
        ),
        flush=True,
    )
    # Each ASGI process's share: one that took most of the class's connections shows here.
    each = [
        seconds - before.get(pid, (role, 0.0))[1]
        for pid, (role, seconds) in sorted(after.items())
        if role.startswith("portal")
    ]
    print("each ASGI process: " + ", ".join(f"{s:.1f} s" for s in each), flush=True)
    for student in students:
        if student.socket is not None:
            await student.socket.close()
        await student.api.aclose()
    return students


def seen(student: Student, mode: str) -> float | None:
    """When the student saw RUNNING: by poll (token), on the page (page)."""
    return student.seen_poll if mode == "token" else student.seen_page


def read_placed(dsn: str, students: list[Student]) -> None:
    """Each session's ``placed_at`` (and ``created_at``, ``started_at`` where no poll read
    them: a page does not poll), from PostgreSQL (a URL) or the embedded SQLite (a path)."""
    ids = [s.session_id for s in students if s.session_id]
    stamps = "s.placed_at, s.created_at, s.started_at"
    if dsn.startswith("postgres"):
        with psycopg.connect(dsn) as db:
            rows = db.execute(
                "SELECT s.id, n.hostname, extract(epoch FROM s.placed_at), "
                "extract(epoch FROM s.created_at), extract(epoch FROM s.started_at) "
                "FROM scheduling_session s LEFT JOIN scheduling_node n ON n.id = s.node_id "
                "WHERE s.id = ANY(%s)",
                (ids,),
            ).fetchall()
        times = {row[0]: [None if t is None else float(t) for t in row[2:]] for row in rows}
    else:
        with sqlite3.connect(dsn) as db:
            rows = db.execute(
                f"SELECT s.id, n.hostname, {stamps} FROM scheduling_session s "
                "LEFT JOIN scheduling_node n ON n.id = s.node_id"
            ).fetchall()
        times = {row[0]: [epoch(t) for t in row[2:]] for row in rows}
    nodes = {row[0]: row[1] for row in rows}
    for student in students:
        placed, created, started = times.get(student.session_id or 0, [None, None, None])
        student.placed = placed
        student.created = student.created or created
        student.started = student.started or started
        student.node = nodes.get(student.session_id or 0) or ""


def report(students: list[Student], mode: str) -> list[str]:
    def of(pairs) -> list[float]:
        return [b - a for a, b in pairs if a is not None and b is not None]

    errors = Counter(s.error.split(":")[0][:60] for s in students if s.error)
    lines = [f"error × {n}: {kind}" for kind, n in errors.most_common()]
    lines.append(f"errors: {sum(errors.values())} of {len(students)} students")
    rows = [
        ("POST -> answered", of((s.submitted, s.answered) for s in students)),
        ("POST -> stored (the session row)", of((s.submitted, s.created) for s in students)),
        ("stored -> placed", of((s.created, s.placed) for s in students)),
        ("placed -> RUNNING stored", of((s.placed, s.started) for s in students)),
        ("stored -> RUNNING stored", of((s.created, s.started) for s in students)),
        ("RUNNING stored -> seen by poll", of((s.started, s.seen_poll) for s in students)),
        ("submit -> RUNNING seen by poll", of((s.submitted, s.seen_poll) for s in students)),
    ]
    if mode == "page":
        rows[1:1] = [
            ("POST -> session page loaded", of((s.submitted, s.page_loaded) for s in students))
        ]
        rows += [
            (
                "RUNNING stored -> seen on the page",
                of((s.started, s.seen_page) for s in students),
            ),
            (
                "submit -> RUNNING seen on the page",
                of((s.submitted, s.seen_page) for s in students),
            ),
        ]
    lines += [f"  {name}: {spread(values)}" for name, values in rows if values]
    nodes = Counter(s.node for s in students if s.node)
    if nodes:
        lines.append("placed on: " + ", ".join(f"{n} {c}" for n, c in sorted(nodes.items())))
    asked = [s.submitted for s in students]
    polls = sum(s.polls for s in students)
    lines.append(f"{polls} polls; all asked within {max(asked) - min(asked):.2f} s")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url")
    parser.add_argument("--prefix", default="storm-si")
    parser.add_argument("--count", type=int, default=200)
    parser.add_argument("--password", required=True)
    parser.add_argument("--mode", choices=("token", "page"), default="token")
    parser.add_argument("--profile", default="cpu-desktop", help="the profile's slug")
    parser.add_argument("--purpose", default="hobby")
    parser.add_argument("--course", default="")
    parser.add_argument("--spread", type=float, default=1.0)
    parser.add_argument("--poll", type=float, default=2.0)
    parser.add_argument("--timeout", type=float, default=180.0)
    parser.add_argument(
        "--page-polls", action="store_true", help="page mode: poll the API beside the page"
    )
    parser.add_argument("--flame", help="a folder: py-spy every role from the first ask")
    parser.add_argument(
        "--dsn", default="", help="PostgreSQL URL or SQLite path, to read placed_at"
    )
    args = parser.parse_args()
    args.url = args.url.rstrip("/")
    students = asyncio.run(storm(args))
    if args.dsn:
        read_placed(args.dsn, students)
    print(*report(students, args.mode), sep="\n", flush=True)
    if args.flame:
        print("where the CPU went (py-spy, from the first ask to the last RUNNING):")
        print(*summary(Path(args.flame)), sep="\n", flush=True)
    return 1 if any(s.error or seen(s, args.mode) is None for s in students) else 0


if __name__ == "__main__":
    sys.exit(main())
