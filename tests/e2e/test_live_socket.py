"""The browser's one reconnecting socket (static/deskpool/live_socket.js, issue 34 item 6), in
Debian's chromium against a small real server standing in for a node's gateway
(tests/e2e/gateway_standin.py) and Playwright standing in for the portal's ticket endpoint.

Every try asks for a new ticket and sends it as the socket's first message; nothing the
gateway sends right after it (or even before it) is lost on the way to noVNC or the player;
the wire's final codes (nodeagent/gateway/codes.py, read from the server's JSON) and the
ticket endpoint's 403 stop it with the reason; the others are tried again with a jittered
backoff, a bounded number of times. No portal processes are started.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from websockets.asyncio.server import ServerConnection

from nodeagent.gateway.codes import (
    CLOSE_FORBIDDEN,
    CLOSE_SIGNED_OUT,
    CLOSE_TICKET_EXPIRED,
    CLOSE_UNREACHABLE,
    live_wire,
)
from tests.e2e.conftest import wait_js
from tests.e2e.gateway_standin import (
    Standin,
    closing_with,
    gateway_standing_in,
    keeping_first,
    rfb_server_none,
)

pytestmark = pytest.mark.browser

PAGE = '<!doctype html><html lang="en"><head><title>t</title></head><body><div id="screen">'
PAGE += "</div></body></html>"

# The page's side: a liveSocket whose every callback is written into window.__log.
START = """async ({ wire, options, rfb }) => {
  const live = await import("/static/deskpool/live_socket.js");
  const RFB = rfb ? (await import("/static/vendor/novnc/core/rfb.js")).default : null;
  const log = (window.__log = []);
  window.__live = live.liveSocket({
    wire,
    open: options.plain
      ? async () => new WebSocket(live.socketUrl(options.plain))
      : live.ticketOpener({ api: "/ticket/", purpose: "screen", csrf: "the-token" }),
    opened(socket) {
      log.push(["opened"]);
      socket.addEventListener("message", (event) => {
        const data = event.data;
        log.push(["message", typeof data === "string" ? data : `bytes:${data.byteLength}`]);
      });
      if (RFB) {
        const screen = new RFB(document.getElementById("screen"), socket);
        screen.addEventListener("connect", () => log.push(["rfb-connected"]));
      }
    },
    closed(why) {
      log.push(["closed", why]);
    },
    canRetry: async () => !options.notRetried,
    firstDelayMs: 200,
    maxTries: options.maxTries ?? 8,
  });
}"""


@pytest.fixture
def chromium_page(stackless_page: Any) -> Any:
    return stackless_page


class TicketDesk:
    """The portal's ticket endpoint: answers in turn with a new ticket for the next of
    ``gateways`` (a stand-in's socket names), or with ``refusal`` (status, body)."""

    def __init__(self, standin: Standin, gateways: list[str], refusal=None) -> None:
        self.standin, self.gateways, self.refusal = standin, gateways, refusal
        self.asked: list[dict] = []

    def __call__(self, route) -> None:
        request = route.request
        self.asked.append(
            {
                "method": request.method,
                "body": request.post_data_json,
                "csrf": request.headers.get("x-csrftoken"),
            }
        )
        if self.refusal:
            status, body = self.refusal
            route.fulfill(status=status, content_type="application/json", body=json.dumps(body))
            return
        name = self.gateways[min(len(self.asked), len(self.gateways)) - 1]
        answer = {
            "ticket": f"ticket-{len(self.asked)}",
            "url": self.standin.gateway_url(name),
            "expires_at": "2030-01-01T00:00:00Z",
        }
        route.fulfill(status=201, content_type="application/json", body=json.dumps(answer))


def start(page, standin: Standin, desk: TicketDesk | None, **options) -> None:
    page.route(f"{standin.origin}/ticket/", desk or (lambda route: route.abort()))
    page.goto(standin.origin + "/")
    rfb = options.pop("rfb", False)
    page.evaluate(START, {"wire": live_wire(), "options": options, "rfb": rfb})


def entries(page, kind: str) -> list:
    return [entry[1:] for entry in page.evaluate("window.__log") if entry[0] == kind]


def test_each_try_asks_a_new_ticket_and_nothing_the_gateway_sends_at_once_is_lost(chromium_page):
    """The first socket's ticket has expired (a retryable close); the second gateway says
    something before reading the ticket and right after it: both arrive, in order."""
    behaviours: dict = {}
    with gateway_standing_in({"/": PAGE}, behaviours) as standin:

        async def eager(connection: ServerConnection) -> None:
            await connection.send("before the ticket")
            standin.first_messages.append(await connection.recv())
            await connection.send("after the ticket")
            await connection.send(b"\x00\x01\x02")
            async for _ in connection:
                pass

        behaviours["expired"] = keeping_first(standin, closing_with(CLOSE_TICKET_EXPIRED))
        behaviours["eager"] = eager
        desk = TicketDesk(standin, ["expired", "eager"])
        start(chromium_page, standin, desk)
        wait_js(chromium_page, "window.__log.filter(e => e[0] === 'message').length >= 3")

        closes = entries(chromium_page, "closed")
        assert len(closes) == 1
        why = closes[0][0]
        assert why["reason"] == "ticket_expired" and why["code"] == CLOSE_TICKET_EXPIRED
        assert why["final"] is False and 100 <= why["retryIn"] <= 200  # jittered first wait
        assert entries(chromium_page, "message") == [
            ["before the ticket"],
            ["after the ticket"],
            ["bytes:3"],
        ]
        # A new ticket for each try, each sent as the socket's first message.
        assert standin.first_messages == ["ticket-1", "ticket-2"]
        assert [a["body"] for a in desk.asked] == [{"purpose": "screen"}] * 2
        assert {a["method"] for a in desk.asked} == {"POST"}
        assert {a["csrf"] for a in desk.asked} == {"the-token"}


def test_novnc_takes_the_open_socket_after_the_ticket(chromium_page):
    """The gateway plays an RFB server (security None) once it has the ticket; noVNC, handed
    the already open socket, connects."""
    behaviours: dict = {}
    with gateway_standing_in({"/": PAGE}, behaviours) as standin:
        behaviours["screen"] = keeping_first(standin, rfb_server_none)
        start(chromium_page, standin, TicketDesk(standin, ["screen"]), rfb=True)
        wait_js(chromium_page, "window.__log.some(e => e[0] === 'rfb-connected')")
        assert standin.first_messages == ["ticket-1"]
        assert entries(chromium_page, "closed") == []


@pytest.mark.parametrize(
    ("code", "reason"), [(CLOSE_FORBIDDEN, "forbidden"), (CLOSE_SIGNED_OUT, "signed_out")]
)
def test_a_final_close_stops_it_and_says_why(chromium_page, code, reason):
    behaviours: dict = {}
    with gateway_standing_in({"/": PAGE}, behaviours) as standin:
        behaviours["final"] = keeping_first(standin, closing_with(code))
        desk = TicketDesk(standin, ["final"])
        start(chromium_page, standin, desk)
        wait_js(chromium_page, "window.__log.some(e => e[0] === 'closed')")
        chromium_page.wait_for_timeout(600)  # past the first retry's wait
        assert entries(chromium_page, "closed") == [
            [{"reason": reason, "code": code, "final": True, "detail": None, "retryIn": None}]
        ]
        assert len(desk.asked) == 1 and len(standin.sockets) == 1


def test_a_refused_ticket_stops_it_with_the_portals_sentence(chromium_page):
    with gateway_standing_in({"/": PAGE}, {}) as standin:
        desk = TicketDesk(standin, [], refusal=(403, {"detail": "Only its owner may open it."}))
        start(chromium_page, standin, desk)
        wait_js(chromium_page, "window.__log.some(e => e[0] === 'closed')")
        chromium_page.wait_for_timeout(600)
        [[why]] = entries(chromium_page, "closed")
        assert why["reason"] == "forbidden" and why["final"] is True
        assert why["detail"] == "Only its owner may open it."
        assert len(desk.asked) == 1 and standin.sockets == []


def test_a_desktop_not_running_is_not_tried_again_once_the_page_says_it_cannot_be_opened(
    chromium_page,
):
    with gateway_standing_in({"/": PAGE}, {}) as standin:
        desk = TicketDesk(standin, [], refusal=(409, {"detail": "It is not running."}))
        start(chromium_page, standin, desk, notRetried=True)
        wait_js(chromium_page, "window.__log.some(e => e[0] === 'closed')")
        [[why]] = entries(chromium_page, "closed")
        assert why["reason"] == "ended" and why["final"] is True
        assert len(desk.asked) == 1


def test_a_gateway_that_stays_unreachable_is_given_up_after_the_last_try(chromium_page):
    behaviours: dict = {}
    with gateway_standing_in({"/": PAGE}, behaviours) as standin:
        behaviours["down"] = keeping_first(standin, closing_with(CLOSE_UNREACHABLE))
        desk = TicketDesk(standin, ["down"])
        start(chromium_page, standin, desk, maxTries=2)
        wait_js(chromium_page, "window.__log.some(e => e[0] === 'closed' && e[1].final)")
        closes = [why for [why] in entries(chromium_page, "closed")]
        assert [why["reason"] for why in closes] == ["unreachable", "unreachable", "gave_up"]
        first, second = closes[0]["retryIn"], closes[1]["retryIn"]
        assert 100 <= first <= 200 and 200 <= second <= 400  # doubled, jittered
        assert standin.first_messages == ["ticket-1", "ticket-2", "ticket-3"]


def test_a_socket_without_ticket_stops_on_signed_out_too(chromium_page):
    """The portal's own sockets (live updates) go through the same helper."""
    behaviours: dict = {"updates": closing_with(CLOSE_SIGNED_OUT)}
    with gateway_standing_in({"/": PAGE}, behaviours) as standin:
        start(chromium_page, standin, None, plain="/gw/updates")
        wait_js(chromium_page, "window.__log.some(e => e[0] === 'closed')")
        chromium_page.wait_for_timeout(600)
        [[why]] = entries(chromium_page, "closed")
        assert why["reason"] == "signed_out" and why["final"] is True
        assert standin.sockets == ["/gw/updates"]
