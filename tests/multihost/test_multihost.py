"""Deskpool on several hosts, on this one machine: nginx in front of two ASGI workers and
two Celery workers, agents and students in network namespaces (``netns.py``).

(a) an agent in a namespace registers through nginx; a student in the campus namespace
    submits through nginx and sees RUNNING on the WebSocket, upgraded through nginx;
(b) 60 students of one course ask within a second onto the two agents while one ASGI worker
    and one Celery worker are killed with SIGKILL: every session reaches RUNNING exactly once;
(c) the campus namespace reaches nginx but not the ASGI workers.

Also, without namespaces: the compose file parses, its nginx site is the deployed one, the
environment files name only real settings, the systemd units read the environment file.
Run: ``.venv/bin/pytest -q -p no:cacheprovider -s tests/multihost`` as root (docs/deploy.md).
"""

from __future__ import annotations

import configparser
import json
import logging
import random
import re
import socket
import statistics
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
import yaml
from websockets.exceptions import ConnectionClosed, InvalidHandshake

from tests.integration.stack import ROOT

from .conftest import NODES
from .netns import HOST_ADDRESS, HOSTS, enter

DEPLOY = ROOT / "deploy"
CAMPUS = HOSTS[0]
SILENT_S = 5.0
END_STATES = {"FAILED", "LOST", "EXPIRED", "CANCELLED", "ENDED"}


def in_namespace(netns: str, work, timeout: float = 120.0):
    """Run ``work()`` on a thread that lives in namespace ``netns``; return what it returns."""
    outcome: dict = {}

    def run() -> None:
        try:
            enter(netns)
            outcome["value"] = work()
        except BaseException as error:  # re-raised on the test's thread
            outcome["error"] = error

    thread = threading.Thread(target=run, name=f"in-{netns}")
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise AssertionError(f"work in {netns} did not finish in {timeout} s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def api(stack, token: str) -> httpx.Client:
    return httpx.Client(
        base_url=stack.url,
        verify=stack.ssl_context(),
        headers={"Authorization": f"Token {token}"},
        timeout=30,
    )


def coursework(stack, course) -> dict:
    return {"profile": stack.profile.pk, "purpose": "coursework", "course": course.code}


def running_events(session_ids) -> dict[int, int]:
    """Per session, how many audit events record its transition to RUNNING."""
    from django.db.models import Count

    from scheduling.choices import AuditKind
    from scheduling.models import AuditEvent

    rows = (
        AuditEvent.objects.filter(
            kind=AuditKind.SESSION_TRANSITION, session_id__in=session_ids, data__to="RUNNING"
        )
        .values("session_id")
        .annotate(n=Count("id"))
    )
    return {row["session_id"]: row["n"] for row in rows}


# --- (a) --------------------------------------------------------------------------------


@pytest.mark.multihost
@pytest.mark.integration
def test_session_through_nginx_runs_and_its_update_arrives_on_the_websocket(multihost, orm):
    from websockets.sync.client import connect as ws_connect
    from websockets.typing import Origin

    from bench.class_start import make_class
    from scheduling.choices import AuditKind
    from scheduling.models import AuditEvent, Node, Session

    # Both agents registered through nginx, from their namespaces' addresses.
    nodes = Node.objects.filter(hostname__in=NODES)
    assert sorted(n.hostname for n in nodes) == NODES
    assert all(n.runtime == "simulated" for n in nodes)
    registered = AuditEvent.objects.filter(kind=AuditKind.NODE_REGISTERED)
    addresses = {e.node_id: e.address for e in registered}
    expected = {multihost.hosts[n.hostname].address for n in nodes}
    assert {addresses.get(n.pk) for n in nodes} == expected, addresses

    course, _, (student,) = make_class("mh-one", 1)
    body = coursework(multihost, course)

    def journey():
        url = multihost.url.replace("https://", "wss://", 1) + "/ws/updates/"
        cookie = {"Cookie": f"{multihost.session_cookie}={student.cookie}"}
        with (
            ws_connect(
                url,
                ssl=multihost.ssl_context(),
                origin=Origin(multihost.url),
                additional_headers=cookie,
                open_timeout=10,
            ) as ws,
            api(multihost, student.token) as client,
        ):
            created = client.post("/api/v1/sessions/", json=body)
            assert created.status_code == 201, created.text
            session_id = created.json()["id"]
            states: list[str] = []
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                message = json.loads(ws.recv(timeout=max(0.1, deadline - time.monotonic())))
                session = message.get("session") or {}
                if message.get("type") != "session.update" or session.get("id") != session_id:
                    continue
                states.append(session["state"])
                if session["state"] == "RUNNING":
                    return session_id, states
                assert session["state"] not in END_STATES, session
            raise AssertionError(f"no RUNNING on the WebSocket in 60 s; saw {states}")

    session_id, states = in_namespace(CAMPUS.netns, journey)
    print(f"\n(a) session {session_id}: updates on the WebSocket through nginx: {states}")
    session = Session.objects.get(pk=session_id)
    assert session.state == "RUNNING"
    assert session.node.hostname in NODES
    assert running_events([session_id]) == {session_id: 1}
    # nginx's X-Forwarded-For (DESKPOOL_TRUSTED_PROXIES=1): the student's own address.
    submitted = AuditEvent.objects.get(kind=AuditKind.SESSION_SUBMITTED, session_id=session_id)
    assert submitted.address == CAMPUS.address


@pytest.mark.multihost
@pytest.mark.integration
def test_nginx_serves_the_static_files_and_redirects_plain_http(multihost):
    def look():
        context = multihost.ssl_context()
        static = httpx.get(
            f"{multihost.url}/static/deskpool/session.js", verify=context, timeout=10
        )
        plain = httpx.get(f"http://{HOST_ADDRESS}:{multihost.http_port}/login/", timeout=10)
        return static.status_code, static.headers.get("server", ""), plain

    status, server, plain = in_namespace(CAMPUS.netns, look)
    assert status == 200 and server.startswith("nginx")
    assert plain.status_code == 301
    assert plain.headers["location"] == f"{multihost.url}/login/"
    # The workers run with DESKPOOL_SERVE_STATIC=0: only nginx has them.
    direct = httpx.get(
        f"http://127.0.0.1:{multihost.asgi_ports[0]}/static/deskpool/session.js", timeout=10
    )
    assert direct.status_code == 404


# --- (b) --------------------------------------------------------------------------------


@dataclass
class Asker:
    """One student of the storm and what happened to their request."""

    student: object
    n: int
    session_id: int | None = None
    submitted_wall: float = 0.0
    resent: str = ""  # why the submit was sent again (or looked up): the first attempt's fate
    adopted: bool = False  # the lost answer had been a 201: found by listing, not resent
    seen_running: float | None = None
    reconnects: int = 0  # the live-updates socket dropped (its ASGI worker was killed)
    ws_failures: list[str] = field(default_factory=list)  # handshakes that failed, tried again
    busy: list[str] = field(default_factory=list)  # 503 + Retry-After answers, waited out
    http_5xx: list[str] = field(default_factory=list)
    error: str = ""


def updates_socket(stack, student):
    """The student's live updates (``/ws/updates/``) through nginx, as their browser has it."""
    from websockets.sync.client import connect as ws_connect
    from websockets.typing import Origin

    connection = ws_connect(
        stack.url.replace("https://", "wss://", 1) + "/ws/updates/",
        ssl=stack.ssl_context(),
        origin=Origin(stack.url),
        additional_headers={"Cookie": f"{stack.session_cookie}={student.cookie}"},
        open_timeout=10,
    )
    # Entered by hand (it outlives this frame, and is replaced on reconnecting); the caller
    # closes it.
    return connection.__enter__()


def ask(stack, asker: Asker, body: dict, ready: threading.Barrier, go: list, until: float):
    """One student of the storm, as the home page behaves: the live updates open, submit at
    this student's moment (see :func:`submit` for when it is sent again), then wait for
    RUNNING on the WebSocket; a socket that drops (its worker died) is opened again and the
    session asked for once, as session.js does."""
    try:
        enter(CAMPUS.netns)
        with api(stack, asker.student.token) as client:
            try:
                client.get("/api/v1/profiles/").raise_for_status()  # the TLS connection, made
                ws = connect_with_retries(stack, asker, until)
            except Exception:
                ready.abort()  # the storm cannot start without every student
                raise
            try:
                ready.wait(120)
                time.sleep(max(0.0, go[0] + asker.n / 60 - time.monotonic()))
                submit(asker, client, body)
                if asker.session_id is not None:
                    ws = wait_running(stack, asker, client, ws, until)
            finally:
                ws.close()
    except Exception as error:
        # Where it came from too: a storm's failure is read from the figures afterwards.
        where = traceback.extract_tb(error.__traceback__)[-3:]
        frames = " <- ".join(f"{f.name}:{f.lineno}" for f in reversed(where))
        asker.error = f"{type(error).__name__}: {error} (at {frames})"


def busy(answer: httpx.Response, asker: Asker, what: str) -> bool:
    """A 503 with Retry-After is the portal's overload answer (portal.server.overload: every
    database connection of that worker busy; nothing was changed): wait as it says and
    ask again, as the pages do. Counted and printed, not a failure."""
    if answer.status_code != 503 or "retry-after" not in answer.headers:
        return False
    asker.busy.append(what)
    time.sleep(float(answer.headers["retry-after"]))
    return True


def sessions_of(asker: Asker, client: httpx.Client) -> list[dict]:
    while True:
        answer = client.get("/api/v1/sessions/")
        if not busy(answer, asker, "GET"):
            answer.raise_for_status()
            return answer.json()


def submit(asker: Asker, client: httpx.Client, body: dict) -> None:
    """Submit; once more if the first attempt got no answer from a worker (a connection
    error, or nginx's 502 for a POST it had sent to the worker that died), after looking
    whether the lost answer had been a 201; again after a 503's Retry-After."""
    asker.submitted_wall = time.time()
    lost = 0
    while True:
        try:
            created = client.post("/api/v1/sessions/", json=body)
        except httpx.TransportError as error:
            fate = f"{type(error).__name__}: {error}"
        else:
            if created.status_code == 201:
                asker.session_id = created.json()["id"]
                return
            if busy(created, asker, "POST"):
                continue
            fate = f"HTTP {created.status_code}"
            if created.status_code not in (502, 504):
                asker.error = f"submit answered {fate}: {created.text[:300]}"
                if created.status_code >= 500:
                    asker.http_5xx.append(f"POST {fate}")
                return
        lost += 1
        if lost == 2:
            asker.error = f"submit failed twice: {fate}"
            return
        asker.resent = fate
        mine = sessions_of(asker, client)
        if mine:
            asker.session_id, asker.adopted = mine[0]["id"], True
            return


# A live-updates handshake is tried this often before the student gives up (a browser's
# page goes on trying; a test must end).
HANDSHAKE_TRIES = 6
# What a handshake may fail with and be tried again, as the page's socket is: refused or
# timed out (OSError), an answer that is no 101 (InvalidHandshake: nginx's 502 when no worker
# took it, daphne's 403 when the application was too slow to accept: daphne gives it 5 s),
# and a connection closed before the answer without a close frame (ConnectionClosed: raised
# when the request is sent on a connection nginx or the worker already dropped).
RETRYABLE_HANDSHAKE = (OSError, InvalidHandshake, ConnectionClosed)


def connect_with_retries(stack, asker: Asker, until: float, tries: int = HANDSHAKE_TRIES):
    """Open the live updates, with backoff and jitter as a browser would (the first attempt
    at once); a handshake that fails with a retryable error is counted (``ws_failures``)
    and tried again, at most ``tries`` times in all and not past ``until``: one student's
    dropped handshake costs that student a retry, not the whole storm."""
    delay = 0.0
    for attempt in range(1, tries + 1):
        time.sleep(delay + random.uniform(0, delay))
        delay = min(max(delay * 2, 0.5), 8.0)
        try:
            return updates_socket(stack, asker.student)
        except RETRYABLE_HANDSHAKE as error:
            asker.ws_failures.append(f"{type(error).__name__}: {error}")
            if attempt == tries or time.monotonic() > until:
                raise
    raise AssertionError("unreachable: the last try returns or raises")


def wait_running(stack, asker: Asker, client: httpx.Client, ws, until: float):
    from websockets.exceptions import ConnectionClosed

    def state_now() -> str:
        answer = client.get(f"/api/v1/sessions/{asker.session_id}/")
        if busy(answer, asker, "GET"):
            return ""
        if answer.status_code >= 500:
            asker.http_5xx.append(f"GET {answer.status_code}")
            return ""
        return answer.json()["state"]

    while time.monotonic() < until:
        try:
            message = json.loads(ws.recv(timeout=SILENT_S))
        except TimeoutError:
            state = state_now()  # silent for a while: ask once (a missed push must not hang)
        except ConnectionClosed:
            asker.reconnects += 1
            ws.close()
            time.sleep(random.uniform(0.2, 1.0))  # not every page at the same moment
            ws = connect_with_retries(stack, asker, until)
            state = state_now()  # what happened while the socket was down
        else:
            session = message.get("session") or {}
            if message.get("type") != "session.update" or session.get("id") != asker.session_id:
                continue
            state = session["state"]
        if state == "RUNNING":
            asker.seen_running = time.monotonic()
            return ws
        if state in END_STATES:
            asker.error = f"session ended {state}"
            return ws
    asker.error = "not RUNNING before the deadline"
    return ws


def phases(askers: list[Asker], sessions: dict) -> list[str]:
    """Where the time went, from each session's own timestamps (one clock: this machine's)."""
    spans: dict[str, list[float]] = {
        "POST -> session stored (the submit, retries included)": [],
        "stored -> PLACED (scheduling cycles)": [],
        "PLACED -> RUNNING stored (agent: wait, start, reports)": [],
    }
    names = list(spans)
    for asker in askers:
        row = sessions.get(asker.session_id)
        if row is None or row.placed_at is None or row.started_at is None:
            continue
        created, placed = row.created_at.timestamp(), row.placed_at.timestamp()
        spans[names[0]].append(created - asker.submitted_wall)
        spans[names[1]].append(placed - created)
        spans[names[2]].append(row.started_at.timestamp() - placed)
    return [
        f"      {name}: p50 {statistics.median(values):.2f} s, "
        f"p95 {percentile(values, 0.95):.2f} s, max {max(values):.2f} s"
        for name, values in spans.items()
        if values
    ]


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, int(-(-share * len(ordered) // 1)) - 1)]


@pytest.mark.multihost
@pytest.mark.integration
def test_storm_of_60_through_nginx_survives_killing_a_worker_of_each_kind(multihost, orm):
    import redis
    from django.conf import settings
    from django.db.models import Count

    from bench.class_start import make_class
    from scheduling.models import Allocation, Session
    from scheduling.tasks import CYCLE_LOCK

    logging.getLogger("httpx").setLevel(logging.WARNING)
    seats = 60
    course, _, students = make_class("mh-storm", seats)
    body = coursework(multihost, course)
    askers = [Asker(student, n) for n, student in enumerate(students)]
    ready = threading.Barrier(seats + 1)
    go: list[float] = []
    until = time.monotonic() + 170
    threads = [
        threading.Thread(target=ask, args=(multihost, a, body, ready, go, until), name=f"s{a.n}")
        for a in askers
    ]
    for thread in threads:
        thread.start()
    go.append(time.monotonic() + 0.3)
    go_wall = time.time() + 0.3
    try:
        ready.wait(120)
    except threading.BrokenBarrierError:
        for thread in threads:
            thread.join(10)
        errors = "\n".join(f"student {a.n}: {a.error}" for a in askers if a.error)
        pytest.fail(f"the storm did not start: not every student was ready\n{errors}")

    # Half a second into the storm: an ASGI worker and a Celery worker die (SIGKILL, the
    # whole process group); systemd would start them again after RestartSec=2s.
    time.sleep(max(0.0, go[0] + 0.5 - time.monotonic()))
    lock = redis.Redis.from_url(settings.LOCK_REDIS_URL)
    multihost.kill("asgi1")
    multihost.kill("worker1")
    killed_at = time.monotonic()
    holder = lock.get(CYCLE_LOCK)
    print(f"\n(b) killed asgi1 and worker1 (SIGKILL) {killed_at - go[0]:.2f} s into the storm")
    time.sleep(2.0)
    multihost.start_asgi(0)
    multihost.start_worker(0)
    time.sleep(1.5)
    stale = holder is not None and lock.get(CYCLE_LOCK) == holder
    if stale:
        print(
            f"    the cycle lock {CYCLE_LOCK} was held by the killed worker: no cycle runs "
            f"until it expires (timeout 120 s, scheduling/tasks.py)"
        )
    for thread in threads:
        thread.join(max(1.0, until + 5 - time.monotonic()))

    ids = [a.session_id for a in askers if a.session_id]
    sessions = Session.objects.in_bulk(ids)
    started = {pk: s.started_at.timestamp() for pk, s in sessions.items() if s.started_at}
    waits = [started[a.session_id] - a.submitted_wall for a in askers if a.session_id in started]
    resent = [a for a in askers if a.resent]
    per_node = Session.objects.filter(pk__in=ids).values("node__hostname").annotate(n=Count("id"))
    lines = [
        f"    {len(started)} of {seats} sessions RUNNING; all RUNNING "
        f"{max(started.values()) - go_wall:.2f} s after the first submit"
        if started
        else "    no session RUNNING",
    ]
    if waits:
        lines.append(
            f"    submit -> RUNNING (stored): p50 {statistics.median(waits):.2f} s, "
            f"p95 {percentile(waits, 0.95):.2f} s, max {max(waits):.2f} s"
        )
    lines.extend(phases(askers, sessions))
    lines.append(
        f"    submits that got no answer from a worker and were retried once: {len(resent)}"
        + "".join(
            f"\n      student {a.n}: {a.resent}"
            f" -> {'found its session (the 201 was lost)' if a.adopted else 'sent again'}"
            for a in resent
        )
    )
    lines.append(
        f"    live-update sockets that dropped with the killed worker and were opened "
        f"again: {sum(a.reconnects for a in askers)}"
    )
    busy_answers = [b for a in askers for b in a.busy]
    lines.append(
        f"    503 'busy, retry after' answers (a worker's database pool exhausted), waited "
        f"out and asked again: {len(busy_answers)} ({busy_answers.count('POST')} POST, "
        f"{busy_answers.count('GET')} GET) to {sum(1 for a in askers if a.busy)} students"
    )
    failures = [f for a in askers for f in a.ws_failures]
    lines.append(
        f"    live-update handshakes that failed and were tried again: "
        f"{len(failures)}" + "".join(f"\n      {f}" for f in sorted(set(failures)))
    )
    lines.append(
        "    per node: "
        + ", ".join(f"{row['node__hostname']}: {row['n']}" for row in per_node.order_by("node"))
    )
    print("\n".join(lines))

    errors = [f"student {a.n}: {a.error}" for a in askers if a.error]
    assert not errors, "\n".join(errors)
    http_5xx = [f"student {a.n}: {a.http_5xx}" for a in askers if a.http_5xx]
    assert not http_5xx, f"HTTP 5xx besides a lost POST and 503 + Retry-After: {http_5xx}"
    # Nothing lost, nothing twice: one session per student, RUNNING once each.
    mine = Session.objects.filter(user__in=[s.user for s in students])
    assert mine.count() == seats
    assert sorted(mine.values_list("pk", flat=True)) == sorted(ids)
    assert {s.state for s in sessions.values()} == {"RUNNING"}
    assert running_events(ids) == {pk: 1 for pk in ids}
    live = Allocation.objects.filter(released_at=None)
    assert not live.values("slice").annotate(n=Count("id")).filter(n__gt=1).exists()
    assert live.filter(session_id__in=ids).count() == seats
    assert set(mine.values_list("node__hostname", flat=True)) <= set(NODES)


# --- (c) --------------------------------------------------------------------------------


def connect(address: str, port: int) -> str:
    try:
        with socket.create_connection((address, port), timeout=3):
            return "connected"
    except ConnectionRefusedError:
        return "refused"
    except OSError as error:  # unreachable, timed out
        return f"unreachable: {error}"


@pytest.mark.multihost
@pytest.mark.integration
def test_campus_reaches_nginx_but_not_the_asgi_workers(multihost):
    def probe():
        workers = {
            f"{address}:{port}": connect(address, port)
            for port in multihost.asgi_ports
            for address in (HOST_ADDRESS, "127.0.0.1")
        }
        login = httpx.get(f"{multihost.url}/login/", verify=multihost.ssl_context(), timeout=10)
        return workers, login.status_code

    workers, login = in_namespace(CAMPUS.netns, probe)
    print(f"\n(c) from {CAMPUS.netns}: nginx /login/ {login}; ASGI workers: {workers}")
    assert login == 200
    assert all(outcome != "connected" for outcome in workers.values()), workers
    # ...while on the host itself they answer (they are up: only the namespace is kept out).
    # The storm's test killed and restarted one: give it the time a daphne takes to start.
    deadline = time.monotonic() + 60
    while not all(connect("127.0.0.1", p) == "connected" for p in multihost.asgi_ports):
        assert time.monotonic() < deadline, "an ASGI worker does not answer on the host"
        time.sleep(0.5)


# --- the files themselves (no namespaces needed) ----------------------------------------


def test_compose_file_parses_and_builds_the_portal_from_the_campus_base_image():
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    services = compose["services"]
    wanted = {"postgres", "redis", "asgi-1", "asgi-2", "worker-1", "worker-2", "beat", "nginx"}
    assert wanted <= set(services)
    for name in ["migrate", "asgi-1", "asgi-2", "worker-1", "worker-2", "beat", "nginx"]:
        build = services[name]["build"]
        assert build["dockerfile"] == "deploy/Dockerfile"
        assert "BASE_IMAGE" in build["args"]
        assert (DEPLOY / build["context"]).resolve() == ROOT
    for name in ["asgi-1", "asgi-2", "worker-1", "worker-2", "beat"]:
        assert services[name]["depends_on"]["migrate"]["condition"] == (
            "service_completed_successfully"
        )
        assert "SECRET_KEY_FILE" in services[name]["environment"]
    # daphne with flow control on its WebSockets (portal.server.daphne_worker)
    assert [services[f"asgi-{n}"]["command"][:3] for n in (1, 2)] == [
        ["python", "-m", "portal.server.daphne_worker"]
    ] * 2
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    assert "ARG BASE_IMAGE" in dockerfile
    assert dockerfile.count("FROM ${BASE_IMAGE}") == 2


def site_lines(path: Path) -> list[str]:
    """The site from ``map`` on: no comments, no blank lines, no upstream ``server`` lines."""
    text = path.read_text()
    text = text[text.index("map $http_upgrade") :]
    lines = [line.split("#")[0].rstrip() for line in text.splitlines()]
    return [line for line in lines if line.strip() and not line.startswith("    server ")]


def test_compose_site_is_the_deployed_site_but_for_the_upstream_servers():
    assert site_lines(DEPLOY / "nginx" / "compose.conf") == site_lines(
        DEPLOY / "nginx" / "deskpool.conf"
    )


def env_names(path: Path) -> set[str]:
    return set(re.findall(r"^#? ?([A-Z][A-Z0-9_]+)=", path.read_text(), flags=re.M))


def test_environment_files_name_only_variables_that_are_read():
    # The settings, the modules they take their parts from, and the agent's configuration.
    sources = [
        ROOT / "portal" / "settings.py",
        ROOT / "portal" / "server" / "hardening.py",
        *sorted((ROOT / "portal" / "signin").glob("*_config.py")),
        ROOT / "nodeagent" / "config.py",
    ]
    read = "".join(source.read_text() for source in sources)
    # Read by libpq (the database password file) and by httpx (a private CA), not by us.
    others = {"PGPASSFILE", "SSL_CERT_FILE"}
    for path in sorted((DEPLOY / "env").glob("*.env")):
        for name in env_names(path) - others:
            base = name.removesuffix("_FILE")
            assert f'"{name}"' in read or (
                name.endswith("_FILE") and f'_secret("{base}"' in read
            ), f"{path.name}: {name} is read by nothing"


def test_systemd_units_read_the_environment_file_and_restart_on_failure():
    units = sorted((DEPLOY / "systemd").glob("*.service"))
    assert {u.name for u in units} == {
        "deskpool-asgi@.service",
        "deskpool-worker@.service",
        "deskpool-beat.service",
        "deskpool-agent.service",
    }
    for unit in units:
        parser = configparser.ConfigParser(strict=False, interpolation=None)
        parser.optionxform = str  # type: ignore[assignment,method-assign]
        parser.read_string(unit.read_text())
        service = parser["Service"]
        assert service["EnvironmentFile"] == "/etc/deskpool/deskpool.env", unit.name
        assert service["Restart"] == "on-failure", unit.name
        assert service["NoNewPrivileges"] == "yes", unit.name
        if unit.name != "deskpool-agent.service":  # root: see the unit's comment
            assert service["User"] == "deskpool", unit.name
            assert service["ProtectSystem"] == "strict", unit.name
            assert service["ReadWritePaths"] == "/var/lib/deskpool", unit.name
    asgi = (DEPLOY / "systemd" / "deskpool-asgi@.service").read_text()
    assert (
        "python -m portal.server.daphne_worker -b 127.0.0.1 -p %i portal.asgi:application" in asgi
    )
