"""The desktop page says why the relay closed, in the reader's language, and stops retrying
when trying again cannot help (issue 25: 4413 over the size limit, 4401 signed out, 4403 no
longer allowed).

The page is the portal's own (rendered by Django for a running session of the owner), its
scripts and noVNC are the files in ``static/``; a small real server (the websockets library)
serves them and stands in for the relay, closing the desktop's socket with the relay's code.
(Playwright's ``route_web_socket`` stand-in is not a channel noVNC accepts.) No portal
processes are started.
"""

from __future__ import annotations

import asyncio
import mimetypes
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from django.test import Client
from websockets.asyncio.server import ServerConnection, serve
from websockets.datastructures import Headers
from websockets.http11 import Request, Response

from scheduling.choices import Purpose, SessionState
from scheduling.models import Node, Session
from scheduling.services.sessions import check_submit, do_submit
from tests.conftest import gpu_inventory
from tests.integration.stack import ROOT

pytestmark = [pytest.mark.django_db, pytest.mark.browser]

CHROMIUM = Path("/usr/bin/chromium")
WORDS = {
    ("en", 4413): "more was sent at once than the portal relays",
    ("zh-hans", 4413): "一次发送的数据超过了门户的转发上限",
    ("en", 4401): "you are signed out",
    ("zh-hans", 4403): "您已无权打开此桌面",
}


def desktop_page(owner, profile, register_node, language: str) -> tuple[int, str]:
    node, _ = register_node("close-node", [gpu_inventory("GPU-close", 0, shares=2)])
    Node.objects.filter(pk=node.pk).update(runtime="docker")  # a real desktop, not simulated
    session = do_submit(owner, check_submit(owner, profile.pk, Purpose.HOBBY, None))
    Session.objects.filter(pk=session.pk).update(
        state=SessionState.RUNNING, node=node, desktop_host="127.0.0.1", desktop_port=9
    )
    browser = Client()
    browser.force_login(owner)
    page = browser.get(f"/desktop/{session.pk}/", HTTP_ACCEPT_LANGUAGE=language)
    assert page.status_code == 200
    return session.pk, page.content.decode()


def static_file(path: str) -> tuple[bytes, str] | None:
    file = (ROOT / path.lstrip("/")).resolve()
    if not file.is_file() or ROOT / "static" not in file.parents:
        return None
    kind = "text/javascript" if file.suffix == ".js" else mimetypes.guess_type(file.name)[0]
    return file.read_bytes(), kind or "application/octet-stream"


@contextmanager
def relay_standing_in(page_path: str, html: str, code: int) -> Iterator[tuple[str, list]]:
    """A server on 127.0.0.1: the page at ``page_path``, ``/static/…``, and every WebSocket
    closed at once with ``code``. Yields its origin and the paths of the sockets opened."""
    sockets: list[str] = []

    async def relay(connection: ServerConnection) -> None:
        sockets.append(connection.request.path if connection.request else "")
        await connection.close(code=code, reason="closed by the test")

    def pages(connection: ServerConnection, request: Request) -> Response | None:
        if request.path.startswith("/ws/"):
            return None  # the WebSocket handshake goes on
        path = request.path.split("?", 1)[0]
        found = (html.encode(), "text/html; charset=utf-8") if path == page_path else None
        found = found or (static_file(path) if path.startswith("/static/") else None)
        if found is None:
            return connection.respond(404, "not here\n")
        body, kind = found
        headers = Headers([("Content-Type", kind), ("Content-Length", str(len(body)))])
        return Response(200, "OK", headers, body)

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    async def start():  # the server is made inside its loop
        return await serve(relay, "127.0.0.1", 0, process_request=pages)

    server = asyncio.run_coroutine_threadsafe(start(), loop).result(timeout=10)
    try:
        port = next(iter(server.sockets)).getsockname()[1]
        yield f"http://127.0.0.1:{port}", sockets
    finally:
        server.close()
        asyncio.run_coroutine_threadsafe(server.wait_closed(), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)


@pytest.mark.parametrize(("language", "code"), sorted(WORDS))
def test_the_desktop_page_says_why_the_relay_closed_and_does_not_retry(
    owner, profile, register_node, language, code
):
    if not CHROMIUM.exists():
        pytest.skip(f"the browser tests drive Debian's chromium: {CHROMIUM} is missing")
    sync_api = pytest.importorskip("playwright.sync_api")
    session_id, html = desktop_page(owner, profile, register_node, language)
    page_path = f"/desktop/{session_id}/"
    with (
        relay_standing_in(page_path, html, code) as (origin, sockets),
        sync_api.sync_playwright() as playwright,
    ):
        chromium = playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=["--no-sandbox", "--disable-gpu"]
        )
        try:
            page = chromium.new_context().new_page()
            page.set_default_timeout(15_000)
            page.goto(origin + page_path)
            expected = WORDS[(language, code)]
            page.wait_for_function(
                "words => document.getElementById('desktop-status').textContent.includes(words)",
                arg=expected,
            )
            # A retry would first say when it tries again; the page keeps its final words.
            status = page.text_content("#desktop-status") or ""
            page.wait_for_timeout(1500)  # longer than the first retry's 1 s wait
            assert page.text_content("#desktop-status") == status
        finally:
            chromium.close()
    desktop_sockets = [path for path in sockets if path.startswith("/ws/desktop/")]
    assert len(desktop_sockets) == 1, "the page tried again after a close that cannot be helped"
