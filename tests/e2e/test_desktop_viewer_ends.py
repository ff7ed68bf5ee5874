"""The desktop page's viewer when the desktop does not answer, and once it has ended (issue 38,
the walk's fixes), in chromium, in English and Chinese.

- A gateway that accepts the screen's socket and stays silent: the try is given up after the
  page's bound (``screen_answer_s``, 15 s; 2 s here, written into the rendered page), the page
  says so in the person's language, and tries again with a new ticket.
- A desktop stopped through the service while its page is open: the live update (the session's
  payload as the portal sends it) ends the viewer: it says the desktop ended and why, the
  screen's socket is not opened again (WebSocket opens counted at the stand-in), every control
  acting on the desktop is disabled, and "My desktops" and "New desktop" are offered; axe finds
  nothing serious.

The page is the portal's own (rendered by Django), its scripts and noVNC the files in
``static/``; tests/e2e/gateway_standin.py serves them and stands in for the node's gateway
and the live updates; Playwright answers the ticket and session endpoints. The ORM work is
done before chromium starts (test_desktop_close_words.chromium_page).
"""

from __future__ import annotations

import asyncio
import json
import threading

import pytest
from django.utils import translation
from websockets.asyncio.server import ServerConnection

from nodeagent.gateway.codes import CLOSE_UNREACHABLE
from scheduling.choices import SessionState
from scheduling.events import session_payload
from scheduling.models import Session
from scheduling.services.sessions import do_stop
from tests.e2e.axe import check_axe, describe
from tests.e2e.gateway_standin import gateway_standing_in, keeping_first, rfb_server_none
from tests.e2e.test_desktop_close_words import answer_tickets, chromium_page, desktop_page

pytestmark = [pytest.mark.django_db, pytest.mark.browser]

BOUND_S = 2
TIMEOUT_WORDS = {
    "en": f"the desktop did not answer within {BOUND_S} s: trying again in",
    "zh-hans": f"桌面在 {BOUND_S} 秒内没有响应",
}
ENDED_WORDS = {
    "en": ("This desktop has ended", "Where it stands: Ended.", "the session has ended"),
    "zh-hans": ("此桌面已结束", "当前状态：已结束", "会话已结束"),
}
CONTROLS = [
    "banner-extend",
    "drawer-extend",
    "drawer-stop",
    "stop-yes",
    "fullscreen",
    "drawer-upload-file",
    "drawer-upload-send",
    "clipboard-text",
    "clipboard-send",
]
STATUS = "() => document.getElementById('desktop-status').textContent"


def screen_opens(standin) -> int:
    return sum(1 for path in standin.sockets if path.startswith("/gw/screen"))


def answer_session(page, origin: str, session_id: int, payload) -> None:
    """The session API (the page's check before each try): ``payload()`` as it stands now."""
    page.route(
        f"{origin}/api/v1/sessions/{session_id}/",
        lambda route: route.fulfill(content_type="application/json", body=json.dumps(payload())),
    )


async def silent(connection: ServerConnection) -> None:
    await connection.wait_closed()  # accepted, the ticket read, and never a word


async def quiet_updates(connection: ServerConnection) -> None:
    async for _ in connection:
        pass


@pytest.mark.parametrize("language", ["en", "zh-hans"])
def test_a_silent_desktop_is_given_up_within_the_bound_said_and_tried_again(
    owner, profile, register_node, language
):
    session_id, html = desktop_page(owner, profile, register_node, language)
    assert '"screen_answer_s": 15' in html  # the bound the page is given
    html = html.replace('"screen_answer_s": 15', f'"screen_answer_s": {BOUND_S}')
    running = {"id": session_id, "state": "RUNNING", "idle": {}, "reason": ""}
    page_path = f"/desktop/{session_id}/"
    behaviours: dict = {"/ws/updates/": quiet_updates}
    with gateway_standing_in({page_path: html}, behaviours) as standin, chromium_page() as page:
        behaviours["screen"] = keeping_first(standin, silent)
        answer_session(page, standin.origin, session_id, lambda: running)
        asked = answer_tickets(page, standin, session_id)
        page.goto(standin.origin + page_path)
        assert (page.text_content("#desktop-status") or "").strip() != ""
        page.wait_for_function(
            f"words => ({STATUS})().includes(words)", arg=TIMEOUT_WORDS[language]
        )
        # Tried again: a new ticket and a second socket (the first one closed by the page).
        for _ in range(40):
            if screen_opens(standin) >= 2:
                break
            page.wait_for_timeout(250)
        assert screen_opens(standin) >= 2
        assert len(asked) >= 2
    assert standin.first_messages[:2] == ["ticket-1", "ticket-2"]


@pytest.mark.parametrize("language", ["en", "zh-hans"])
def test_a_stopped_desktop_ends_the_viewer_without_trying_again(
    owner, profile, register_node, language
):
    session_id, html = desktop_page(owner, profile, register_node, language)
    with translation.override(language):
        session = Session.objects.get(pk=session_id)
        do_stop(owner, session, by_person=True)  # the service, as another tab's Stop
        stopping = session_payload(Session.objects.get(pk=session_id))
        Session.objects.filter(pk=session_id).update(state=SessionState.ENDED)
        ended = session_payload(Session.objects.get(pk=session_id))
    assert stopping["state"] == SessionState.STOPPING and ended["state"] == SessionState.ENDED
    running = {**stopping, "state": "RUNNING"}
    stopped = threading.Event()

    async def updates(connection: ServerConnection) -> None:
        while not stopped.is_set():
            await asyncio.sleep(0.05)
        for payload in (stopping, ended):
            await connection.send(json.dumps({"type": "session.update", "session": payload}))
            await asyncio.sleep(0.2)
        async for _ in connection:
            pass

    async def screen(connection: ServerConnection) -> None:
        # The desktop until it stops; then the gateway loses it (a close that is tried again
        # while the desktop can still be opened).
        served = asyncio.create_task(rfb_server_none(connection))
        while not stopped.is_set():
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.1)
        await connection.close(code=CLOSE_UNREACHABLE)
        served.cancel()

    page_path = f"/desktop/{session_id}/"
    behaviours: dict = {"/ws/updates/": updates}
    with gateway_standing_in({page_path: html}, behaviours) as standin, chromium_page() as page:
        behaviours["screen"] = keeping_first(standin, screen)
        answer_session(
            page, standin.origin, session_id, lambda: ended if stopped.is_set() else running
        )
        asked = answer_tickets(page, standin, session_id)
        page.goto(standin.origin + page_path)
        page.wait_for_function(
            f"() => ({STATUS})() === "
            "JSON.parse(document.getElementById('page-config').textContent).words.connected"
        )
        assert page.is_visible("#screen canvas") and page.is_hidden("#desktop-ended")
        stopped.set()
        page.wait_for_selector("#desktop-ended", state="visible")
        page.wait_for_timeout(2500)  # longer than the first retry's wait (at most 1 s)
        title, where, status = ENDED_WORDS[language]
        assert page.text_content("#ended-title") == title
        assert (page.text_content("#ended-why") or "").startswith(where)
        assert page.text_content("#desktop-status") == status
        assert page.evaluate("document.activeElement.id") == "ended-title"
        assert page.is_hidden("#screen") and page.is_hidden("#screen-help")
        disabled = page.evaluate(
            "ids => ids.map(id => [id, document.getElementById(id).disabled])", CONTROLS
        )
        assert disabled == [[name, True] for name in CONTROLS]
        links = page.eval_on_selector_all(
            "#desktop-ended a", "links => links.map(a => a.getAttribute('href'))"
        )
        assert links == ["/", "/#new-desktop"]
        # Still off a few ticks later (the drawer's own checks run every second).
        page.click("#drawer-toggle")
        page.wait_for_timeout(1200)
        assert page.is_disabled("#drawer-stop") and page.is_disabled("#clipboard-send")
        serious = check_axe(page, f"desktop-ended-{language}")
        assert serious == [], describe(serious)
        assert screen_opens(standin) == 1  # not opened again
        assert len(asked) == 1
