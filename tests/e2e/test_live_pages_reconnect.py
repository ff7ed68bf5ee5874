"""A console page and the live class go through the pages' one reconnecting socket (issue 34,
item 6): after a server restart they connect again and go on, once the sign-in ends (the
server closes with the wire's signed_out) they stop trying and say so.

The pages are the portal's own, rendered by Django's test client (their templates, the
``#live-wire`` the context processor renders, their scripts from ``static/``); Debian's
chromium loads them, and Playwright stands in for the server's sockets
(``route_web_socket``). No portal processes are started.
"""

from __future__ import annotations

import json
from contextlib import ExitStack
from pathlib import Path

import pytest
from django.test import Client

from nodeagent.gateway.codes import CLOSE_SIGNED_OUT, COURSE_PATH, UPDATES_PATH
from people.models import Course
from tests.integration.stack import ROOT

from .conftest import wait_js

CHROMIUM = Path("/usr/bin/chromium")
ORIGIN = "http://deskpool.test"
RESTART = 1012  # the server's "service restart": what a restarted ASGI worker's sockets see


@pytest.fixture
def chromium_page(db):
    """Start chromium and give its page: called after the test has rendered its pages, as
    Playwright's sync API keeps an event loop running in this thread, which the ORM refuses."""
    if not CHROMIUM.exists():
        pytest.skip(f"the browser tests drive Debian's chromium: {CHROMIUM} is missing")
    sync_api = pytest.importorskip("playwright.sync_api")
    with ExitStack() as stack:

        def start():
            playwright = stack.enter_context(sync_api.sync_playwright())
            chromium = playwright.chromium.launch(
                executable_path=str(CHROMIUM), args=["--no-sandbox", "--disable-gpu"]
            )
            stack.callback(chromium.close)
            context = chromium.new_context()
            context.set_default_timeout(15_000)
            return context.new_page()

        yield start


def rendered(user, *paths: str) -> dict[str, str]:
    """The pages as the portal renders them for ``user``."""
    client = Client()
    client.force_login(user)
    pages = {}
    for path in paths:
        answer = client.get(path)
        assert answer.status_code == 200, path
        pages[path] = answer.content.decode()
    return pages


def serve(page, pages: dict[str, str]) -> None:
    """The rendered pages at their paths, the static files from the checkout."""

    def html(body: str):
        return lambda route: route.fulfill(body=body, content_type="text/html")

    for path, body in pages.items():
        page.route(f"{ORIGIN}{path}", html(body))

    def static(route) -> None:
        name = route.request.url.removeprefix(f"{ORIGIN}/static/").split("?")[0]
        file = ROOT / "static" / name
        if not file.is_file():
            route.fulfill(status=404)
            return
        kind = "text/javascript" if name.endswith(".js") else "text/css"
        route.fulfill(body=file.read_bytes(), content_type=kind)

    page.route(f"{ORIGIN}/static/**", static)


def restart_then_sign_out(first_update: str) -> tuple[list, object]:
    """A socket server: the first socket is dropped as a restarting worker drops it, the second
    sends ``first_update`` and, told so, closes with signed_out."""
    sockets: list = []

    def handler(ws) -> None:
        sockets.append(ws)
        if len(sockets) == 1:
            ws.close(code=RESTART, reason="worker restarting")
        else:
            ws.send(first_update)

    return sockets, handler


def wait_for(page, condition, seconds: float = 15) -> None:
    """Let the page run (and Playwright answer its sockets) until ``condition()`` holds."""
    for _ in range(int(seconds * 10)):
        if condition():
            return
        page.wait_for_timeout(100)
    raise AssertionError("the page did not get there in time")


def settles_without_a_new_socket(page, sockets: list) -> None:
    page.wait_for_timeout(2500)  # past the first waits a retry would take (0.5 s, 1 s)
    assert len(sockets) == 2


@pytest.mark.browser
def test_the_class_page_reconnects_after_a_restart_and_stops_once_signed_out(
    chromium_page, make_user
):
    teacher = make_user("prof")
    course = Course.objects.create(code="cs101", title="Intro")
    course.instructors.add(teacher)
    path = f"/courses/{course.code}/"
    pages = rendered(teacher, path)
    words = json.loads(
        pages[path].split('<script id="class-live-data" type="application/json">')[1].split("<")[0]
    )["words"]
    row = '<tr id="class-row-7"><td>s1</td><td>RUNNING</td></tr>'
    sockets, handler = restart_then_sign_out(
        json.dumps({"type": "class.row", "session": 7, "html": row})
    )
    page = chromium_page()
    serve(page, pages)
    # The socket's path is the wire's (nodeagent/gateway/codes.py), not one the script holds.
    socket_glob = "**" + COURSE_PATH.format(code=course.code)
    page.route_web_socket(socket_glob, handler)
    page.goto(f"{ORIGIN}{path}")

    wait_js(page, "document.getElementById('class-row-7') !== null")
    assert len(sockets) == 2  # dropped once, connected again: the row came on the second
    assert page.text_content("#class-live") == words["live"]

    sockets[1].close(code=CLOSE_SIGNED_OUT, reason="signed out")
    wait_js(page, f"document.getElementById('class-live').textContent === {words['stopped']!r}")
    settles_without_a_new_socket(page, sockets)


@pytest.mark.browser
def test_the_console_queue_reconnects_after_a_restart_and_stops_once_signed_out(
    chromium_page, make_user
):
    admin = make_user("root", is_staff=True)
    pages = rendered(admin, "/console/queue/", "/console/queue/fragment/")
    words = json.loads(
        pages["/console/queue/"]
        .split('<script id="queue-live-data" type="application/json">')[1]
        .split("<")[0]
    )["words"]
    sockets, handler = restart_then_sign_out(json.dumps({"type": "admin.session"}))
    fetched: list[str] = []

    page = chromium_page()
    serve(page, {"/console/queue/": pages["/console/queue/"]})

    def fragment(route) -> None:
        fetched.append(route.request.url)  # the page catches up on every (re)connection
        route.fulfill(body=pages["/console/queue/fragment/"], content_type="text/html")

    page.route(f"{ORIGIN}/console/queue/fragment/", fragment)
    page.route_web_socket("**" + UPDATES_PATH + "**", handler)
    page.goto(f"{ORIGIN}/console/queue/")

    wait_for(page, lambda: len(sockets) == 2)  # dropped once, connected again
    wait_for(page, lambda: bool(fetched))  # and caught up (its fetch may come a moment later)

    sockets[1].close(code=CLOSE_SIGNED_OUT, reason="signed out")
    wait_js(page, f"document.getElementById('queue-live').textContent === {words['stopped']!r}")
    settles_without_a_new_socket(page, sockets)
