"""The data plane through nginx (issue 34; docs/architecture.md "Two planes"): a student in the
campus namespace opens a desktop's screen at ``wss://<nginx>/gw/<node>/<port>/screen``, and
nginx carries it to the gateway on the node's management address, never through the ASGI
workers.

The desktops: each node agent is the real agent and gateway (``python -m
tests.multihost.stand_in_node``: ``python -m nodeagent`` whose SIMULATED runtime says its
desktops answer on the node's stand-in desktop, ``stand_in_desktop.py``, a process in the
node's namespace that logs in as websockify does, answers with a ServerInit, and floods once
asked to repaint). The real RFB login is tested on real desktops in tests/nodeagent/gateway.

(d) the ticket through nginx opens the screen (ServerInit back), the gateway's report
    becomes a ``desktop.opened`` audit row with the campus address nginx saw;
(e) a replayed ticket (4409), a forged one (4400), another node's ticket sent here (4421),
    /gw/ paths outside the management network or to another port (404, no gateway asked),
    and the campus cannot reach the gateway's port itself;
(f) logging out closes an open screen within 2 s (4401); stopping the session another (4410);
(g) a desktop flooding a viewer who stopped reading leaves the gateway's and nginx's
    memory bounded, and the stream goes on when the viewer reads again.
"""

from __future__ import annotations

import re
import struct
import subprocess
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect
from websockets.typing import Origin

from nodeagent.gateway.codes import (
    CLOSE_SESSION_ENDED,
    CLOSE_SIGNED_OUT,
    CLOSE_TICKET_FOREIGN,
    CLOSE_TICKET_INVALID,
    CLOSE_TICKET_REPLAYED,
)

from .conftest import NODES
from .netns import GATEWAY_PORT, HOST_ADDRESS
from .stand_in_desktop import CHUNK, HEIGHT, WIDTH
from .test_multihost import CAMPUS, api, coursework, in_namespace
from .test_multihost import connect as tcp_connect

REVOKED_WITHIN_S = 2.0  # the bound on revocation
WAIT_S = 15.0
# The upgrade through nginx to a gateway answers in milliseconds here. Twice in CI it did not:
# once over 15 s (then the test's next step 45 s more), once not in 60 s, neither reproduced
# since (alone, under CPU and disk load, or after the tests that precede it in CI). A
# handshake unanswered in OPEN_TRY_S raises HandshakeStalled with what the processes on the
# way were doing; the steps that may run again from the start (with new tickets: a ticket
# lives 30 s) are tried again, as the page tries again, the stall a warning.
OPEN_TRY_S = 30.0
OPEN_TRIES = 3
STALL_REPORT_S = 10.0
FLOOD_S = 6.0  # how long the hostile desktop's viewer does not read
GATEWAY_GROWTH_MAX_MB = 40.0  # 4-message queues of at most 1 MiB each way, and some
NGINX_GROWTH_MAX_MB = 16.0  # an upgraded connection's fixed buffers


@dataclass
class Desktop:
    """A student's running desktop, and how they reach the portal."""

    student: Any
    session_id: int
    node: str


def web(stack, student) -> httpx.Client:
    """The student's browser: their login session's cookie and its CSRF token (as a page's
    script sends them), after one page."""
    client = httpx.Client(
        base_url=stack.url,
        verify=stack.ssl_context(),
        cookies={stack.session_cookie: student.cookie},
        timeout=30,
    )
    client.get("/").raise_for_status()
    csrf = next(value for name, value in client.cookies.items() if "csrftoken" in name)
    client.headers.update({"X-CSRFToken": csrf, "Referer": stack.url + "/"})
    return client


def ticket(client: httpx.Client, session_id: int) -> dict:
    answer = client.post(f"/api/v1/sessions/{session_id}/ticket/", json={"purpose": "screen"})
    assert answer.status_code == 201, answer.text
    return answer.json()


def screen_url(stack, node: str) -> str:
    address = stack.hosts[node].address
    return f"wss://{HOST_ADDRESS}:{stack.https_port}/gw/{address}/{GATEWAY_PORT}/screen"


class HandshakeStalled(AssertionError):
    """No answer to the opening handshake in OPEN_TRY_S; the message says what the
    processes on the way were doing (:func:`stall_report`)."""


def open_socket(stack, url: str, **options: Any) -> ClientConnection:
    # What the processes were doing is read while the handshake waits, not after it gave up
    # (by then the stall may be over): a report is taken STALL_REPORT_S into every try.
    taken: list[str] = []
    watch = threading.Timer(STALL_REPORT_S, lambda: taken.append(stall_report(stack)))
    watch.daemon = True
    watch.start()
    try:
        connection = connect(
            url,
            ssl=stack.ssl_context(),
            origin=Origin(stack.url),
            open_timeout=OPEN_TRY_S,
            **options,
        )
    except TimeoutError:
        watch.join()
        report = taken[0] if taken else stall_report(stack)
        raise HandshakeStalled(
            f"{url}: no answer to the opening handshake in {OPEN_TRY_S:.0f} s; "
            f"{STALL_REPORT_S:.0f} s into it:\n{report}"
        ) from None
    finally:
        watch.cancel()
    # Entered by hand (the caller closes it), as test_multihost's updates_socket does.
    return connection.__enter__()


def stall_report(stack) -> str:
    """What the processes between the browser and the desktops were doing: each one's state
    and its threads' kernel wait channels (a gateway blocked on a write, say), the gateways'
    sockets (a listening one whose queue grows: a gateway that stopped accepting), and the
    tail of nginx's gateway and error logs and of the agents' (with their gateways') logs."""
    lines: list[str] = []
    processes: dict[str, psutil.Process] = {}
    finders: dict[str, Callable[[], psutil.Process]] = {
        "nginx": lambda: psutil.Process(stack.processes["nginx"].pid)
    }
    for node in NODES:
        finders[f"agent-{node}"] = lambda n=node: psutil.Process(stack.processes[f"agent-{n}"].pid)
        finders[f"gateway-{node}"] = lambda n=node: gateway_process(stack, n)
    # A report must not fail in its turn: a process gone or between two gateways (a restart)
    # is named with why it could not be read.
    for name, find in finders.items():
        try:
            processes[name] = find()
        except (psutil.Error, AssertionError) as error:
            lines.append(f"{name}: not found ({error!r})")
    try:
        processes |= {f"nginx worker {w.pid}": w for w in nginx_workers(stack)}
    except psutil.Error as error:
        lines.append(f"nginx's workers: {error!r}")
    for name, process in processes.items():
        try:
            tasks = Path(f"/proc/{process.pid}/task").iterdir()
            waits = sorted({(task / "wchan").read_text() for task in tasks})
            cpu = sum(process.cpu_times()[:2])
            lines.append(f"{name} ({process.pid}): {process.status()}, CPU {cpu:.1f} s, {waits}")
        except (psutil.Error, OSError) as error:
            lines.append(f"{name}: {error!r}")
    for node in NODES:
        netns = stack.hosts[node].netns
        ss = ["ip", "netns", "exec", netns, "ss", "-tan", f"sport = :{GATEWAY_PORT}"]
        listed = subprocess.run(ss, capture_output=True, text=True, check=False)
        lines.append(f"{node}'s sockets on {GATEWAY_PORT}:\n{listed.stdout}{listed.stderr}")
    for log in ("nginx-gateway", "nginx-error", *(f"agent-{node}" for node in NODES)):
        lines.append(f"--- {log} ---\n{stack.log_tail(log, 8)}")
    return "\n".join(lines)


def log_in(browser: ClientConnection) -> tuple[int, int]:
    """noVNC's part of the handshake (security type None), ClientInit, and the desktop's
    ServerInit: its width and height."""
    version = browser.recv(WAIT_S)
    assert version == b"RFB 003.008\n", version
    browser.send(version)
    assert browser.recv(WAIT_S) == bytes([1, 1])  # security type None, from the gateway
    browser.send(bytes([1]))
    assert browser.recv(WAIT_S) == b"\0\0\0\0"
    browser.send(b"\x01")  # ClientInit: shared
    server_init = b""
    while len(server_init) < 24:
        message = browser.recv(WAIT_S)
        assert isinstance(message, bytes)
        server_init += message
    width, height = struct.unpack(">HH", server_init[:4])
    return width, height


def open_screen(stack, url: str, text: str, **options: Any) -> ClientConnection:
    """A logged-in screen (opened in the campus namespace by the caller)."""
    browser = open_socket(stack, url, **options)
    browser.send(text)
    assert log_in(browser) == (WIDTH, HEIGHT)
    return browser


def close_code(browser: ClientConnection, within: float = WAIT_S) -> int | None:
    """Read until the gateway closes; its close code."""
    deadline = time.monotonic() + within
    try:
        while True:
            browser.recv(max(0.01, deadline - time.monotonic()))
    except ConnectionClosed:
        pass
    return browser.close_code


def refusal(stack, url: str, first: str) -> int | None:
    with open_socket(stack, url) as browser:
        browser.send(first)
        return close_code(browser)


def campus(work: Callable[[], Any], tries: int = 1) -> Any:
    """``work()`` in the campus namespace; up to ``tries`` times when a handshake stalls."""
    for attempt in range(1, tries + 1):
        try:
            return in_namespace(CAMPUS.netns, work)
        except HandshakeStalled as stalled:
            if attempt == tries:
                raise
            warnings.warn(f"try {attempt} of {tries}: {stalled}", stacklevel=2)
    raise AssertionError("unreachable: the last try returns or raises")


def start_on(stack, student, course, node: str) -> Desktop:
    """The student's session, placed on ``node`` (the other node cordoned meanwhile), RUNNING."""
    from scheduling.models import Node, Session

    others = Node.objects.filter(hostname__in=NODES).exclude(hostname=node)
    others.update(cordoned=True)
    try:
        with api(stack, student.token) as client:
            created = client.post("/api/v1/sessions/", json=coursework(stack, course))
            assert created.status_code == 201, created.text
            session_id = created.json()["id"]
            deadline = time.monotonic() + 60
            while Session.objects.get(pk=session_id).state != "RUNNING":
                assert time.monotonic() < deadline, f"session {session_id} not RUNNING in 60 s"
                time.sleep(0.25)
    finally:
        others.update(cordoned=False)
    session = Session.objects.select_related("node").get(pk=session_id)
    assert session.node is not None and session.node.hostname == node
    assert session.desktop_port is not None  # the stand-in's port: the gateway may open it
    return Desktop(student, session_id, node)


@pytest.fixture(scope="module")
def desktops(multihost, orm_module) -> Iterator[dict[str, Desktop]]:
    """Running desktops: ``viewer``'s and ``stopper``'s on node1, ``other``'s on node2."""
    from bench.class_start import make_class
    from scheduling.models import Session

    course, _, students = make_class("mh-gateway", 3)
    made: dict[str, Desktop] = {}
    try:
        for name, student, node in zip(
            ("viewer", "stopper", "other"), students, ("node1", "node1", "node2"), strict=True
        ):
            made[name] = start_on(multihost, student, course, node)
        yield made
    finally:
        for desktop in made.values():
            if Session.objects.get(pk=desktop.session_id).state == "RUNNING":
                with api(multihost, desktop.student.token) as client:
                    client.post(f"/api/v1/sessions/{desktop.session_id}/stop/")


def gateway_process(stack, node: str) -> psutil.Process:
    agent = psutil.Process(stack.processes[f"agent-{node}"].pid)
    found = [
        child
        for child in agent.children(recursive=True)
        if "nodeagent.gateway" in " ".join(child.cmdline())
    ]
    assert len(found) == 1, [child.cmdline() for child in agent.children(recursive=True)]
    return found[0]


def nginx_workers(stack) -> list[psutil.Process]:
    return psutil.Process(stack.processes["nginx"].pid).children()


def mb(process: psutil.Process) -> float:
    return process.memory_info().rss / 2**20


def desktop_sent(stack, node: str) -> int:
    """What the node's stand-in desktop has sent so far (its log's last line)."""
    found = re.findall(r"sent screen=(\d+)", (stack.logs / f"desktop-{node}.log").read_text())
    return int(found[-1]) if found else 0


# --- (d) --------------------------------------------------------------------------------


@pytest.mark.multihost
@pytest.mark.integration
def test_a_ticket_through_nginx_opens_the_screen_and_the_open_is_audited(multihost, desktops, orm):
    from scheduling.choices import AuditKind
    from scheduling.models import AuditEvent

    viewer = desktops["viewer"]

    def view() -> tuple[dict, float]:
        with api(multihost, viewer.student.token) as client:
            issued = ticket(client, viewer.session_id)
        started = time.monotonic()
        with open_screen(multihost, issued["url"], issued["ticket"]):
            return issued, time.monotonic() - started

    issued, took = campus(view, tries=OPEN_TRIES)
    assert issued["url"] == screen_url(multihost, "node1")
    print(f"\n(d) ticket -> ServerInit through nginx and node1's gateway: {took * 1000:.0f} ms")
    deadline = time.monotonic() + WAIT_S
    while not (
        opened := AuditEvent.objects.filter(
            kind=AuditKind.DESKTOP_OPENED, session_id=viewer.session_id
        ).first()
    ):
        assert time.monotonic() < deadline, "no desktop.opened audit row"
        time.sleep(0.1)
    print(f"    desktop.opened audited {time.monotonic() - deadline + WAIT_S:.2f} s later")
    assert opened.address == CAMPUS.address  # X-Real-IP from nginx, a trusted proxy
    assert opened.actor == f"user:{viewer.student.user.username}"
    # The ticket rides in the first message: no log on the way holds it.
    for log in multihost.logs.glob("nginx*.log"):
        assert issued["ticket"] not in log.read_text(), log.name


# --- (e) --------------------------------------------------------------------------------


@pytest.mark.multihost
@pytest.mark.integration
def test_replayed_and_forged_tickets_are_refused_and_no_other_gw_path_reaches_a_node(
    multihost, desktops
):
    viewer = desktops["viewer"]
    url = screen_url(multihost, "node1")
    address = multihost.hosts["node1"].address

    def attempts() -> dict[str, Any]:
        with api(multihost, viewer.student.token) as client:
            used = ticket(client, viewer.session_id)["ticket"]
            fresh = ticket(client, viewer.session_id)["ticket"]
        open_screen(multihost, url, used).close()
        claims, signature = fresh.split(".")
        forged = f"{claims}.{signature[:10]}{'A' if signature[10] != 'A' else 'B'}{signature[11:]}"
        context = multihost.ssl_context()
        base = f"https://{HOST_ADDRESS}:{multihost.https_port}/gw"
        paths = {
            "campus": f"{base}/{CAMPUS.address}/{GATEWAY_PORT}/screen",
            "loopback": f"{base}/127.0.0.1/{GATEWAY_PORT}/screen",
            "outside": f"{base}/10.20.0.6/{GATEWAY_PORT}/screen",
            "another port": f"{base}/{address}/22/screen",
            "another path": f"{base}/{address}/{GATEWAY_PORT}/admin",
        }
        return {
            "replayed": refusal(multihost, url, used),
            "forged": refusal(multihost, url, forged),
            "not a ticket": refusal(multihost, url, "hello"),
            "direct": tcp_connect(address, GATEWAY_PORT),
            **{name: httpx.get(path, verify=context, timeout=10).status_code
               for name, path in paths.items()},
        }  # fmt: skip

    seen = campus(attempts, tries=OPEN_TRIES)
    print(f"\n(e) {seen}")
    assert seen["replayed"] == CLOSE_TICKET_REPLAYED
    assert seen["forged"] == CLOSE_TICKET_INVALID
    assert seen["not a ticket"] == CLOSE_TICKET_INVALID
    for name in ("campus", "loopback", "outside", "another port", "another path"):
        assert seen[name] == 404, name
    # None of those reached nginx's /gw/ location (its own log), so no gateway was asked.
    gateway_log = (multihost.logs / "nginx-gateway.log").read_text()
    assert "/admin" not in gateway_log and "/22/" not in gateway_log
    assert f"/gw/{CAMPUS.address}/" not in gateway_log
    # The campus cannot reach the gateway itself; this host (nginx) can.
    assert seen["direct"] != "connected", seen["direct"]
    assert tcp_connect(address, GATEWAY_PORT) == "connected"


@pytest.mark.multihost
@pytest.mark.integration
def test_a_ticket_for_the_other_node_is_refused_as_foreign(multihost, desktops):
    other = desktops["other"]

    def send_here() -> int | None:
        with api(multihost, other.student.token) as client:
            issued = ticket(client, other.session_id)
        assert issued["url"] == screen_url(multihost, "node2")
        return refusal(multihost, screen_url(multihost, "node1"), issued["ticket"])

    code = campus(send_here, tries=OPEN_TRIES)
    print(f"\n(e) node2's ticket sent to node1's gateway: closed {code}")
    assert code == CLOSE_TICKET_FOREIGN


# --- (f) --------------------------------------------------------------------------------


def closed_after(browser: ClientConnection, act: Callable[[], None]) -> tuple[int | None, float]:
    """Do ``act``, then wait for the gateway to close ``browser``: its code and the seconds
    from the start of ``act``."""
    started = time.monotonic()
    act()
    code = close_code(browser, within=WAIT_S)
    return code, time.monotonic() - started


@pytest.mark.multihost
@pytest.mark.integration
def test_logout_and_stopping_the_session_close_open_screens_within_2_s(multihost, desktops):
    viewer, stopper = desktops["viewer"], desktops["stopper"]
    url = screen_url(multihost, "node1")

    def scenario() -> dict[str, tuple[int | None, float]]:
        browser_session = web(multihost, viewer.student)
        try:
            mine = open_screen(multihost, url, ticket(browser_session, viewer.session_id)["ticket"])

            def log_out() -> None:
                answer = browser_session.post("/logout/")
                assert answer.status_code in (200, 302), answer.status_code

            logged_out = closed_after(mine, log_out)
        finally:
            browser_session.close()
        with api(multihost, stopper.student.token) as client:
            theirs = open_screen(multihost, url, ticket(client, stopper.session_id)["ticket"])

            def stop() -> None:
                client.post(f"/api/v1/sessions/{stopper.session_id}/stop/").raise_for_status()

            stopped = closed_after(theirs, stop)
        return {"logout": logged_out, "stop": stopped}

    seen = campus(scenario)
    print(
        f"\n(f) logout -> screen closed {seen['logout'][0]} in {seen['logout'][1]:.2f} s; "
        f"stop -> closed {seen['stop'][0]} in {seen['stop'][1]:.2f} s"
    )
    assert seen["logout"][0] == CLOSE_SIGNED_OUT
    assert seen["logout"][1] < REVOKED_WITHIN_S
    assert seen["stop"][0] == CLOSE_SESSION_ENDED
    assert seen["stop"][1] < REVOKED_WITHIN_S


# --- (g) --------------------------------------------------------------------------------


@pytest.mark.multihost
@pytest.mark.integration
def test_a_desktop_flooding_a_viewer_who_stopped_reading_leaves_gateway_and_nginx_bounded(
    multihost, desktops
):
    viewer = desktops["viewer"]  # signed out on the web by now; their API token still holds
    url = screen_url(multihost, "node1")
    gateway = gateway_process(multihost, "node1")
    workers = nginx_workers(multihost)
    before = {"gateway": mb(gateway), "nginx": sum(mb(w) for w in workers)}
    peak = dict(before)
    sent: list[int] = []
    stop_sampling = threading.Event()

    def sample() -> None:
        while not stop_sampling.wait(0.25):
            peak["gateway"] = max(peak["gateway"], mb(gateway))
            peak["nginx"] = max(peak["nginx"], sum(mb(w) for w in workers))

    def flood() -> int:
        with api(multihost, viewer.student.token) as client:
            issued = ticket(client, viewer.session_id)
        # The browser reads nothing more: websockets stops reading its socket after one
        # queued message, so the kernel's buffers fill and the stream backs up to the desktop.
        browser = open_screen(multihost, url, issued["ticket"], max_queue=1, max_size=2**21)
        browser.send(struct.pack(">BBHHHH", 3, 0, 0, 0, WIDTH, HEIGHT))  # repaint, please
        for _ in range(int(FLOOD_S / 0.5)):
            time.sleep(0.5)
            sent.append(desktop_sent(multihost, "node1"))
        # Reading again, the stream goes on: held back, not broken.
        taken = 0
        while taken < 8 * CHUNK:
            taken += len(browser.recv(WAIT_S))
        browser.close()
        return taken

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        taken = campus(flood)
    finally:
        stop_sampling.set()
        sampler.join()
    growth = {name: peak[name] - before[name] for name in before}
    print(
        f"\n(g) the desktop sent {sent[-1] / 2**20:.1f} MiB to a viewer who read nothing "
        f"for {FLOOD_S:.0f} s (held back after {sent[len(sent) // 2] / 2**20:.1f} MiB at "
        f"half time); the gateway {before['gateway']:.0f} MB, "
        f"+{growth['gateway']:.1f} MB at most; nginx's workers {before['nginx']:.0f} MB, "
        f"+{growth['nginx']:.1f} MB at most; {taken / 2**20:.1f} MiB read afterwards"
    )
    assert sent[-1] > 0, "the desktop never started to repaint"
    assert sent[-1] == sent[len(sent) // 2], f"the desktop was not held back: {sent}"
    assert sent[-1] < 64 * 2**20, sent
    assert growth["gateway"] < GATEWAY_GROWTH_MAX_MB, growth
    assert growth["nginx"] < NGINX_GROWTH_MAX_MB, growth
    assert gateway.is_running()
