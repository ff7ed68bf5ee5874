"""The desktop page says why its screen closed, in the reader's language, and stops trying
when trying again cannot help (issue 25; issue 34: through the node's gateway, with a ticket).

The page is the portal's own (rendered by Django for a running session of the owner), its
scripts and noVNC are the files in ``static/``; a small real server (the websockets library,
tests/e2e/gateway_standin.py) serves them and stands in for the gateway, reading the page's
ticket and closing with the wire's code (nodeagent/gateway/codes.py); Playwright answers the
ticket endpoint. No portal processes are started.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from django.test import Client
from websockets.asyncio.server import ServerConnection

from nodeagent.gateway.codes import (
    CLOSE_FORBIDDEN,
    CLOSE_SIGNED_OUT,
    CLOSE_TICKET_FOREIGN,
    CLOSE_TOO_BIG,
    CLOSE_UNREACHABLE,
    live_wire,
)
from scheduling.choices import Purpose, SessionState
from scheduling.models import Node, Session
from scheduling.services.sessions import check_submit, do_submit
from tests.conftest import gpu_inventory
from tests.e2e.gateway_standin import (
    Standin,
    closing_with,
    gateway_standing_in,
    keeping_first,
)

pytestmark = [pytest.mark.django_db, pytest.mark.browser]

CHROMIUM = Path("/usr/bin/chromium")
WORDS = {
    ("en", CLOSE_TOO_BIG): "more was sent at once than the desktop's connection carries",
    ("zh-hans", CLOSE_TOO_BIG): "一次发送的数据超过了桌面连接的上限",
    ("en", CLOSE_SIGNED_OUT): "you are signed out",
    ("zh-hans", CLOSE_FORBIDDEN): "您已无权打开此桌面",
    ("en", CLOSE_TICKET_FOREIGN): "the desktop's node did not accept this page's pass",
    ("zh-hans", CLOSE_TICKET_FOREIGN): "桌面所在节点未接受此页面的通行凭证",
}


def desktop_page(owner, profile, register_node, language: str) -> tuple[int, str]:
    node, _ = register_node("close-node", [gpu_inventory("GPU-close", 0, shares=2)])
    Node.objects.filter(pk=node.pk).update(runtime="docker", gateway_port=9)  # a real desktop
    session = do_submit(owner, check_submit(owner, profile.pk, Purpose.HOBBY, None))
    Session.objects.filter(pk=session.pk).update(
        state=SessionState.RUNNING, node=node, desktop_host="127.0.0.1", desktop_port=9
    )
    browser = Client()
    browser.force_login(owner)
    page = browser.get(f"/desktop/{session.pk}/", HTTP_ACCEPT_LANGUAGE=language)
    assert page.status_code == 200
    return session.pk, page.content.decode()


async def live_updates(connection: ServerConnection) -> None:
    async for _ in connection:  # the page's /ws/updates/: open, quiet
        pass


def answer_tickets(page, standin: Standin, session_id: int, refusal=None) -> list[dict]:
    """The ticket endpoint: a new ticket to the stand-in's screen, or ``refusal``."""
    asked: list[dict] = []

    def answer(route) -> None:
        asked.append(route.request.post_data_json)
        if refusal:
            status, body = refusal
            route.fulfill(status=status, content_type="application/json", body=json.dumps(body))
            return
        body = {
            "ticket": f"ticket-{len(asked)}",
            "url": standin.gateway_url("screen"),
            "expires_at": "2030-01-01T00:00:00Z",
        }
        route.fulfill(status=201, content_type="application/json", body=json.dumps(body))

    page.route(f"{standin.origin}/api/v1/sessions/{session_id}/ticket/", answer)
    return asked


@contextmanager
def chromium_page() -> Iterator[Any]:
    """A page in Debian's chromium. Started after the test's ORM work: while Playwright's
    event loop runs in this thread, Django would give the ORM another connection, outside
    the test's transaction."""
    if not CHROMIUM.exists():
        pytest.skip(f"the browser tests drive Debian's chromium: {CHROMIUM} is missing")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=["--no-sandbox", "--disable-gpu"]
        )
        try:
            page = browser.new_context().new_page()
            page.set_default_timeout(15_000)
            yield page
        finally:
            browser.close()


def test_the_page_renders_the_wire_and_the_ticket_endpoint_and_no_relay(
    owner, profile, register_node
):
    session_id, html = desktop_page(owner, profile, register_node, "en")
    wire = json.loads(
        html.split('<script id="live-wire" type="application/json">')[1].split("<")[0]
    )
    assert wire == live_wire()
    config = json.loads(
        html.split('<script id="page-config" type="application/json">')[1].split("</script>")[0]
    )
    assert config["ticket_api"] == f"/api/v1/sessions/{session_id}/ticket/"
    assert "/ws/desktop/" not in html  # the portal's relay is not the way any more


@pytest.mark.parametrize(("language", "code"), sorted(WORDS))
def test_the_desktop_page_says_why_the_gateway_closed_and_does_not_retry(
    owner, profile, register_node, language, code
):
    session_id, html = desktop_page(owner, profile, register_node, language)
    page_path = f"/desktop/{session_id}/"
    behaviours: dict = {"/ws/updates/": live_updates}
    with gateway_standing_in({page_path: html}, behaviours) as standin, chromium_page() as page:
        behaviours["screen"] = keeping_first(standin, closing_with(code))
        asked = answer_tickets(page, standin, session_id)
        page.goto(standin.origin + page_path)
        expected = WORDS[(language, code)]
        page.wait_for_function(
            "words => document.getElementById('desktop-status').textContent.includes(words)",
            arg=expected,
        )
        # A retry would first say when it tries again; the page keeps its final words.
        status = page.text_content("#desktop-status") or ""
        page.wait_for_timeout(1500)  # longer than the first retry's wait
        assert page.text_content("#desktop-status") == status
    assert standin.first_messages == ["ticket-1"]  # the ticket, as the first message
    assert asked == [{"purpose": "screen"}]
    assert [path for path in standin.sockets if path.startswith("/gw/")] == ["/gw/screen"]


def test_a_refused_ticket_shows_the_portals_sentence_and_opens_nothing(
    owner, profile, register_node
):
    session_id, html = desktop_page(owner, profile, register_node, "en")
    page_path = f"/desktop/{session_id}/"
    updates = {"/ws/updates/": live_updates}
    with gateway_standing_in({page_path: html}, updates) as standin, chromium_page() as page:
        refusal = (403, {"detail": "Only the desktop's owner and admins may open it."})
        asked = answer_tickets(page, standin, session_id, refusal)
        page.goto(standin.origin + page_path)
        page.wait_for_function(
            "() => document.getElementById('desktop-status').textContent"
            '.includes("Only the desktop\'s owner")'
        )
        page.wait_for_timeout(1500)
        assert len(asked) == 1
    assert [path for path in standin.sockets if path.startswith("/gw/")] == []


def test_an_unreachable_desktop_is_tried_again_with_a_new_ticket_and_says_so(
    owner, profile, register_node
):
    session_id, html = desktop_page(owner, profile, register_node, "en")
    page_path = f"/desktop/{session_id}/"
    behaviours: dict = {"/ws/updates/": live_updates}
    with gateway_standing_in({page_path: html}, behaviours) as standin, chromium_page() as page:
        behaviours["screen"] = keeping_first(standin, closing_with(CLOSE_UNREACHABLE))
        # The session is still openable: the page's check before each try says so.
        page.route(
            f"{standin.origin}/api/v1/sessions/{session_id}/",
            lambda route: route.fulfill(
                content_type="application/json",
                body=json.dumps({"id": session_id, "state": "RUNNING", "idle": {}}),
            ),
        )
        asked = answer_tickets(page, standin, session_id)
        page.goto(standin.origin + page_path)
        page.wait_for_function(
            "() => document.getElementById('desktop-status').textContent"
            ".includes('the desktop does not answer: trying again in')"
        )
        page.wait_for_timeout(2500)  # the first wait is at most 1 s
        assert len(asked) >= 2
    assert standin.first_messages[:2] == ["ticket-1", "ticket-2"]
