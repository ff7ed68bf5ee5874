"""The desktop's screen and the keyboard, and the live changes told to a screen reader (issue 38),
in chromium, in English and Chinese.

- The screen is reached with Tab (noVNC's canvas, named, with the instructions); inside it Tab,
  Shift+Tab and Esc go to the desktop (the RFB key events read at the gateway stand-in) and the
  focus stays; Ctrl+Alt+Shift, held together and let go, leaves it for the Controls button (or
  the open drawer's Close), and the desktop sees the keys let go (none stays held); the chord
  with another key in between does not leave. The instructions are on the page and in the drawer.
- The home and session pages tell a queue position's change once in the page's polite live
  region (#announcer, announce.js); a burst right after it is held back (the region unchanged
  while the card already shows the burst's last position); the desktop becoming ready is told
  at once. The desktop page tells a preemption's first warning at once, politely (no alert);
  the quota page tells an answer with its row (each cell after its column's heading).

The pages are the portal's own (rendered by Django), their scripts and noVNC the files in
``static/``; tests/e2e/gateway_standin.py serves them and stands in for the gateway and the live
updates, which carry the session's payload and fragment as the portal renders them
(``session_payload``, ``render_forms``). The ORM work is done before chromium starts.
"""

from __future__ import annotations

import asyncio
import json
import queue
import struct
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone, translation
from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed

from people.models import Course
from portal.kit.session_fragment import DETAIL, ITEM, render_forms
from scheduling.choices import Purpose, SessionState
from scheduling.events import quota_request_payload, session_payload
from scheduling.models import Session
from scheduling.models.policy import QuotaRequest, QuotaRequestState
from scheduling.services.sessions import check_submit, do_submit
from tests.e2e.axe import check_axe, describe
from tests.e2e.gateway_standin import gateway_standing_in, keeping_first, rfb_server_none
from tests.e2e.test_desktop_close_words import answer_tickets, chromium_page, desktop_page
from tests.e2e.test_desktop_viewer_ends import answer_session

pytestmark = [pytest.mark.django_db, pytest.mark.browser]

# X keysyms (RFB KeyEvent: message type 4, down flag, two bytes of padding, the keysym).
TAB, ESCAPE, CONTROL_L = 0xFF09, 0xFF1B, 0xFFE3
LETTER_T = (0x54, 0x74)  # T or t, as noVNC reads the chord's Shift
HELP = {
    "en": "to leave it, press Ctrl+Alt+Shift together and let go",
    "zh-hans": "同时按下 Ctrl+Alt+Shift 然后松开",
}
QUEUE_WORDS = {"en": "Queue position: ", "zh-hans": "排队位置： "}
READY = {"en": "Desktop #{id} is ready to open.", "zh-hans": "桌面 #{id} 已就绪，可以打开。"}
ACTIVE = (
    "() => document.activeElement && (document.activeElement.id || document.activeElement.tagName)"
)
CONNECTED = (
    "() => document.getElementById('desktop-status').textContent === "
    "JSON.parse(document.getElementById('page-config').textContent).words.connected"
)
# Every text the page's live region is given, in order.
WATCH_ANNOUNCER = """
() => {
  const region = document.getElementById("announcer");
  window.__said = [];
  new MutationObserver(() => window.__said.push(region.textContent))
    .observe(region, {childList: true, characterData: true, subtree: true});
  return region.getAttribute("aria-live");
}
"""


def key_event(keysym: int, down: bool) -> bytes:
    return struct.pack(">BBxxI", 4, int(down), keysym)


def sent(record: bytearray, keysym: int, down: bool = True) -> bool:
    return key_event(keysym, down) in record


def wait_until(page, check, what: str, tries: int = 60) -> None:
    """Poll ``check()`` (the stand-in's record) while the page runs, up to 15 s."""
    for _ in range(tries):
        if check():
            return
        page.wait_for_timeout(250)
    raise AssertionError(f"never happened: {what}")


def tab_until(page, target: str, limit: int = 40) -> list[str]:
    """Press Tab until the focus is on ``target`` (an id or a tag name); the path taken."""
    path = []
    for _ in range(limit):
        page.keyboard.press("Tab")
        path.append(page.evaluate(ACTIVE))
        if path[-1] == target:
            return path
    raise AssertionError(f"Tab never reached {target}: {path}")


async def quiet_updates(connection: ServerConnection) -> None:
    async for _ in connection:
        pass


def feeding(outbox: queue.Queue[str]):
    """The live updates' socket: sends what the test puts in ``outbox``, until the page goes."""

    async def updates(connection: ServerConnection) -> None:
        while True:
            try:
                await connection.send(outbox.get_nowait())
                continue
            except queue.Empty:
                pass
            try:
                await asyncio.wait_for(connection.recv(), 0.05)  # the page says nothing
            except TimeoutError:
                continue
            except ConnectionClosed:
                return

    return updates


def connected_desktop(page, standin, session_id: int, html_path: str) -> None:
    answer_session(
        page, standin.origin, session_id, lambda: {"id": session_id, "state": "RUNNING", "idle": {}}
    )
    answer_tickets(page, standin, session_id)
    page.goto(standin.origin + html_path)
    page.wait_for_function(CONNECTED)


@pytest.mark.parametrize("language", ["en", "zh-hans"])
def test_tab_reaches_the_screen_which_keeps_tab_and_esc_and_the_chord_leaves_it(
    owner, profile, register_node, language
):
    session_id, html = desktop_page(owner, profile, register_node, language)
    record = bytearray()
    page_path = f"/desktop/{session_id}/"
    behaviours: dict = {"/ws/updates/": quiet_updates}
    with gateway_standing_in({page_path: html}, behaviours) as standin, chromium_page() as page:
        behaviours["screen"] = keeping_first(
            standin, lambda connection: rfb_server_none(connection, record=record)
        )
        connected_desktop(page, standin, session_id, page_path)
        # The instructions: under the screen, and in the drawer (its Screen part).
        assert HELP[language] in (page.text_content("#screen-help") or "")
        assert page.is_visible("#screen-help")
        assert HELP[language] in (page.text_content("#drawer-keys") or "")

        # Tab reaches the screen, after the Controls button; it is named and described.
        path = tab_until(page, "CANVAS")
        assert "drawer-toggle" in path, path
        canvas = page.locator("#screen canvas")
        assert canvas.get_attribute("role") == "application"
        assert canvas.get_attribute("aria-label") == page.get_attribute("#screen", "data-label")
        assert canvas.get_attribute("aria-describedby") == "screen-help"
        violations = check_axe(page, f"desktop-screen-focused-{language}")
        assert not violations, describe(violations)

        # Inside, Tab, Shift+Tab and Esc go to the desktop, and the focus stays.
        for key in ("Tab", "Shift+Tab", "Escape"):
            page.keyboard.press(key)
            assert page.evaluate(ACTIVE) == "CANVAS", key
        wait_until(page, lambda: sent(record, TAB) and sent(record, ESCAPE), "Tab and Esc sent")
        assert page.is_hidden("#drawer")  # Esc was the desktop's, not the page's

        # The chord with another key in between is the desktop's too.
        for key in ("Control", "Alt", "Shift"):
            page.keyboard.down(key)
        page.keyboard.press("KeyT")
        for key in ("Shift", "Alt", "Control"):
            page.keyboard.up(key)
        assert page.evaluate(ACTIVE) == "CANVAS"
        wait_until(page, lambda: any(sent(record, t) for t in LETTER_T), "the T sent")

        # The chord alone leaves, for the Controls button; the desktop sees Ctrl let go.
        del record[:]
        page.keyboard.press("Control+Alt+Shift")
        assert page.evaluate(ACTIVE) == "drawer-toggle"
        wait_until(page, lambda: sent(record, CONTROL_L, down=False), "Control let go")

        # With the drawer open: Tab goes through it to the screen, Esc there is the desktop's
        # (the drawer stays open), and the chord leaves for the drawer's Close.
        page.keyboard.press("Enter")
        assert page.evaluate(ACTIVE) == "drawer-close"
        tab_until(page, "CANVAS")
        page.keyboard.press("Escape")
        assert page.evaluate(ACTIVE) == "CANVAS" and page.is_visible("#drawer")
        page.keyboard.press("Control+Alt+Shift")
        assert page.evaluate(ACTIVE) == "drawer-close"
        page.keyboard.press("Escape")  # the drawer's own Esc: closed, back on its button
        assert page.is_hidden("#drawer") and page.evaluate(ACTIVE) == "drawer-toggle"


def queued_session(owner, profile) -> Session:
    session = do_submit(owner, check_submit(owner, profile.pk, Purpose.HOBBY, None))
    return Session.objects.get(pk=session.pk)


def updates_at(session_id: int, language: str, form: str, changes: list[dict]) -> list[str]:
    """The live updates the portal would send for ``changes`` of the session, one by one, as
    JSON: the payload and the page's form of the fragment, in ``language``."""
    messages = []
    for change in changes:
        Session.objects.filter(pk=session_id).update(**change)
        with translation.override(language):
            payload = session_payload(Session.objects.get(pk=session_id))
            html = render_forms(payload, (form,))
        messages.append(json.dumps({"type": "session.update", "session": payload, **html}))
    return messages


def waiting(position: int) -> dict:
    return {
        "queue_position": position,
        "reason_code": "waiting",
        "reason_params": {"ahead": position - 1, "tier": "hobby"},
        "eta": timezone.now() + timedelta(minutes=10 * position),
    }


def page_of(owner, path: str, language: str) -> str:
    client = Client()
    client.force_login(owner)
    answer = client.get(path, HTTP_ACCEPT_LANGUAGE=language)
    assert answer.status_code == 200
    return answer.content.decode()


@pytest.mark.parametrize(("language", "form"), [("en", DETAIL), ("en", ITEM), ("zh-hans", DETAIL)])
def test_a_queue_change_is_told_once_a_burst_waits_and_ready_is_told_at_once(
    owner, profile, language, form
):
    session = queued_session(owner, profile)
    Session.objects.filter(pk=session.pk).update(**waiting(3))
    path = f"/sessions/{session.pk}/" if form == DETAIL else "/"
    html = page_of(owner, path, language)
    ready = {"state": SessionState.RUNNING, "queue_position": None, "reason_code": "", "eta": None}
    first, *burst, last = updates_at(
        session.pk, language, form, [waiting(2), waiting(1), {"reason_code": ""}, ready]
    )
    outbox: queue.Queue[str] = queue.Queue()
    updates = feeding(outbox)

    card = f'.session-card[data-session-id="{session.pk}"]'
    with (
        gateway_standing_in({path: html}, {"/ws/updates/": updates}) as standin,
        chromium_page() as page,
    ):
        page.goto(standin.origin + path)
        assert page.evaluate(WATCH_ANNOUNCER) == "polite"
        assert page.get_attribute(f"{card} [data-live=state]", "aria-live") is None  # one region

        outbox.put(first)
        page.wait_for_function("() => window.__said.length === 1")
        told = page.evaluate("window.__said[0]")
        assert QUEUE_WORDS[language] + "2" in told, told
        assert page.text_content(f"{card} [data-announce].reason") in told

        # A burst right after: the cards follow at once, the region waits (~30 s).
        for message in burst:
            outbox.put(message)
        page.wait_for_function(
            "card => !document.querySelector(card + ' .reason')", arg=card
        )  # the burst's last update is in
        assert QUEUE_WORDS[language] + "1" in (page.text_content(card) or "")
        assert page.evaluate("window.__said.length") == 1

        # Ready: told at once, whatever waited.
        outbox.put(last)
        page.wait_for_function("() => window.__said.length === 2")
        told = page.evaluate("window.__said[1]")
        assert told.startswith(READY[language].format(id=session.pk)), told
        assert page.is_visible(f"{card} a[href='/desktop/{session.pk}/']")


def test_a_preemption_warning_on_the_desktop_page_is_told_at_once_and_politely(
    owner, profile, register_node
):
    session_id, html = desktop_page(owner, profile, register_node, "en")
    deadline = timezone.now() + timedelta(minutes=4, seconds=30)
    Session.objects.filter(pk=session_id).update(
        state=SessionState.PREEMPTING, preempt_deadline=deadline
    )
    payload = session_payload(Session.objects.get(pk=session_id))
    outbox: queue.Queue[str] = queue.Queue()
    updates = feeding(outbox)

    page_path = f"/desktop/{session_id}/"
    behaviours: dict = {"/ws/updates/": updates}
    with gateway_standing_in({page_path: html}, behaviours) as standin, chromium_page() as page:
        behaviours["screen"] = keeping_first(standin, rfb_server_none)
        connected_desktop(page, standin, session_id, page_path)
        assert page.evaluate(WATCH_ANNOUNCER) == "polite"
        assert page.get_attribute("#banner-text", "role") is None  # no alert
        outbox.put(json.dumps({"type": "session.update", "session": payload}))
        page.wait_for_function("() => window.__said.length === 1")
        told = page.evaluate("window.__said[0]")
        assert told == page.text_content("#banner-text") and "5 min" in told, told


def test_a_quota_answer_is_told_politely_with_its_row(owner, make_user):
    course = Course.objects.create(code="cs101", title="Deep learning lab", department="cs")
    course.students.add(owner)
    asked = QuotaRequest.objects.create(student=owner, course=course, hours=5, reason="a run")
    html = page_of(owner, "/quota-requests/", "en")
    QuotaRequest.objects.filter(pk=asked.pk).update(
        state=QuotaRequestState.GRANTED,
        answer="Granted for the thesis run",
        answered_by=make_user("ines"),
    )
    answer = quota_request_payload(
        QuotaRequest.objects.select_related("course", "answered_by").get(pk=asked.pk)
    )
    outbox: queue.Queue[str] = queue.Queue()
    path = "/quota-requests/"
    with (
        gateway_standing_in({path: html}, {"/ws/updates/": feeding(outbox)}) as standin,
        chromium_page() as page,
    ):
        page.goto(standin.origin + path)
        assert page.evaluate(WATCH_ANNOUNCER) == "polite"
        assert page.locator("#my-requests [aria-live]").count() == 0  # one region: said once
        outbox.put(json.dumps({"type": "quota.update", "request": answer}))
        page.wait_for_function("() => window.__said.length === 1")
        told = page.evaluate("window.__said[0]")
        assert told.startswith("Course: cs101 — GPU-hours: 5 — Asked: "), told
        assert told.endswith("State: Granted — Answer: Granted for the thesis run"), told
