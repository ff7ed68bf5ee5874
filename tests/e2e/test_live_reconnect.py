"""The pages' live-updates socket comes back after the server drops it (issue 25, item 12),
and stops once the person is signed out (issue 34, item 6: the one reconnecting socket).

A JS-level test of ``static/deskpool/session.js`` (and live_socket.js, which it imports) in
Debian's chromium: Playwright stands in for the portal (the page, its scripts and the
``/ws/updates/`` socket, ``route_web_socket``), closes the socket from the server's side after
the first update, as a killed ASGI worker does, and sees the page connect again (after its
jittered backoff) and show the next update. No portal processes are started.
"""

from __future__ import annotations

import json

import pytest

from nodeagent.gateway.codes import CLOSE_SIGNED_OUT, live_wire
from tests.integration.stack import ROOT

ORIGIN = "http://deskpool.test"
CONFIG = {
    "fragment": "item",
    "csrf_token": "token",
    "words": {"live": "live", "reconnecting": "reconnecting…", "stopped": "not live"},
}
PAGE = f"""<!doctype html><html lang="en"><head><title>home</title></head><body>
<p id="live">connecting</p>
<div id="session-list">CARD</div>
<p id="no-sessions" hidden>none</p>
<script id="page-config" type="application/json">{json.dumps(CONFIG)}</script>
<script id="live-wire" type="application/json">{json.dumps(live_wire())}</script>
<script type="module" src="/static/deskpool/session.js"></script>
</body></html>"""


def card(state: str) -> str:
    return (
        f'<article class="session-card item" data-session-id="5" data-variant="item">'
        f'<strong data-live="state">{state}</strong></article>'
    )


def update(state: str) -> str:
    return json.dumps({"type": "session.update", "session": {"id": 5}, "html_item": card(state)})


@pytest.fixture
def page(stackless_page):
    return stackless_page


def serve_scripts(page) -> None:
    """session.js and the modules it imports."""

    def fulfil(script: str):
        return lambda route: route.fulfill(body=script, content_type="text/javascript")

    for name in ("session.js", "live_socket.js", "announce.js"):
        script = (ROOT / "static" / "deskpool" / name).read_text()
        page.route(f"{ORIGIN}/static/deskpool/{name}", fulfil(script))


@pytest.mark.browser
def test_the_page_connects_again_after_the_server_drops_its_socket_and_gets_the_next_update(
    page,
):
    page.route(f"{ORIGIN}/", lambda route: route.fulfill(body=PAGE.replace("CARD", card("QUEUED")),
                                                         content_type="text/html"))  # fmt: skip
    serve_scripts(page)
    sockets = []

    def serve(ws) -> None:
        sockets.append(ws)
        if len(sockets) == 1:
            ws.send(update("PLACED"))
            ws.close(code=1012, reason="worker restarting")  # the server drops it
        else:
            ws.send(update("RUNNING"))  # the catch-up: what changed while it was down

    page.route_web_socket("**/ws/updates/**", serve)
    page.goto(f"{ORIGIN}/")

    page.wait_for_function("document.querySelector('[data-live=state]').textContent === 'RUNNING'")
    assert len(sockets) == 2
    # Each attempt names the card the page shows, for the socket to send it as it is now.
    assert all(ws.url.endswith("/ws/updates/?fragment=item&sessions=5") for ws in sockets)
    assert page.text_content("#live") == "live"  # back to live after reconnecting
    assert page.locator(".session-card").count() == 1  # replaced, not added


@pytest.mark.browser
def test_the_waits_between_attempts_grow_with_jitter_and_stop_growing(page):
    """Every attempt fails at once; the page's own timer calls say how long it waited."""
    page.add_init_script(
        "window.__waits = [];"
        "const realTimeout = window.setTimeout;"
        "window.setTimeout = (fn, ms, ...rest) => {"
        "  if (fn && fn.name === 'attempt') { window.__waits.push(ms); ms = 0; }"
        "  return realTimeout(fn, ms, ...rest); };"
    )
    page.route(f"{ORIGIN}/", lambda route: route.fulfill(body=PAGE.replace("CARD", card("QUEUED")),
                                                         content_type="text/html"))  # fmt: skip
    serve_scripts(page)
    page.route_web_socket("**/ws/updates/**", lambda ws: ws.close(code=1011))
    page.goto(f"{ORIGIN}/")

    page.wait_for_function("window.__waits.length >= 8")
    waits = page.evaluate("window.__waits.slice(0, 8)")
    ceilings = [500, 1000, 2000, 4000, 8000, 10000, 10000, 10000]
    for wait, ceiling in zip(waits, ceilings, strict=True):
        assert ceiling / 2 <= wait <= ceiling, waits
    # Jittered: not the fixed schedule every page would share.
    assert any(wait != ceiling for wait, ceiling in zip(waits, ceilings, strict=True)), waits


@pytest.mark.browser
def test_the_page_stops_trying_once_signed_out_and_says_so(page):
    page.route(f"{ORIGIN}/", lambda route: route.fulfill(body=PAGE.replace("CARD", card("QUEUED")),
                                                         content_type="text/html"))  # fmt: skip
    serve_scripts(page)
    sockets = []

    def serve(ws) -> None:
        sockets.append(ws)
        ws.close(code=CLOSE_SIGNED_OUT, reason="signed out")

    page.route_web_socket("**/ws/updates/**", serve)
    page.goto(f"{ORIGIN}/")
    page.wait_for_function("document.getElementById('live').textContent === 'not live'")
    page.wait_for_timeout(1500)  # past the first waits a retry would take
    assert len(sockets) == 1
