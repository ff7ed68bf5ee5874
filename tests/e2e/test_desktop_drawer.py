"""The desktop page's side drawer in a real browser (issue 27), at 1280 and 390 px, in English
and in Chinese: the Controls button opens and closes it (Escape too, the focus back on the
button), a 320 px panel on a laptop and the whole width on a phone; it shows the time left and
the end time in the person's zone; Extend moves the limit (the DB, the audit trail and the
session API agree) and is then disabled with the profile's reason; Stop asks in the page (no
browser dialog), Keep it running changes nothing, Stop ends the session and the drawer says
where it stands; the clipboard goes both ways with the desktop; the on-screen keyboard's button
shows only on a touch device, and what is typed through it reaches the desktop; a file
uploaded from the drawer lands in the running desktop's home.

Everything is real (daphne portal, Celery worker, Docker agent, deskpool/tiny: Xvnc and one
xterm, no window manager, so the keyboard goes to the window under the pointer). What the
desktop received is read back from files the xterm's shell wrote in the desktop's home.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from people.preferences import save_preferences
from scheduling.choices import AuditKind
from scheduling.models import AuditEvent, DesktopProfile, Session
from scheduling.services.nodes import do_create_join_token
from scheduling.services.sessions import check_submit, do_submit
from tests.conftest import TEST_IMAGE

from ..integration.stack import wait_for, write_fleet
from .axe import check_axe, describe
from .conftest import log_in, wait_js
from .test_browser import (
    CANVAS_COLOURS,
    FOLLOWS_SCREEN,
    OUTPUT,
    open_desktop,
    session_containers,
    through_the_gateway,
    watch_sockets,
)

pytestmark = [pytest.mark.browser, pytest.mark.integration, pytest.mark.docker]

ZONE = "Asia/Kathmandu"  # UTC+05:45: neither the browser's zone nor the server's
MAX_MINUTES, STEP_MINUTES, TOTAL_MINUTES = 30, 10, 40  # one extension, then no more
LAPTOP = {"width": 1280, "height": 900}
PHONE = {"width": 390, "height": 844}
# A point inside the xterm (at +40+40 on the desktop), on its first line.
XTERM_FIRST_LINE = (120, 48)


@pytest.fixture
def running_desktop(stack, owner, profile, docker_engine, require_image, tmp_path):
    """ada's hobby desktop on deskpool/tiny, RUNNING, with a 30-minute limit, 10-minute steps
    and room for one; ada reads times in Kathmandu's zone. Yields the session's id."""
    require_image(TEST_IMAGE)
    DesktopProfile.objects.filter(pk=profile.pk).update(
        max_duration_minutes=MAX_MINUTES,
        extend_step_minutes=STEP_MINUTES,
        max_total_minutes=TOTAL_MINUTES,
    )
    save_preferences(owner, time_zone=ZONE)
    session = do_submit(owner, check_submit(owner, profile.pk, "hobby", None))
    stack.start_agent(
        do_create_join_token(stack.node, actor="test"),
        write_fleet(tmp_path / "fleet.yaml", stack.node, 1),
    )
    wait_for(lambda: session_of(session.pk).state == "RUNNING", 120, "RUNNING")
    return session.pk  # its container and home volume go with the stack


def session_of(session_id: int) -> Session:
    return Session.objects.select_related("profile").get(pk=session_id)


def hhmm(moment: datetime) -> str:
    return moment.astimezone(ZoneInfo(ZONE)).strftime("%H:%M")


def desktop_file(docker_engine, session_id: int, name: str) -> bytes:
    """A file in the desktop's home, as its shell wrote it (b"" until it exists)."""
    containers = session_containers(docker_engine, session_id)
    if not containers:
        return b""
    result = containers[0].exec_run(["cat", f"/home/desktop/{name}"])
    return result.output if result.exit_code == 0 else b""


def open_the_desktop(page, session_id: int) -> dict:
    """The desktop page, connected, its framebuffer the size of #screen with the xterm
    painted, through the node's gateway; the canvas's box."""
    page.goto(f"/sessions/{session_id}/")
    sockets = watch_sockets(page)
    open_desktop(page, session_id)
    wait_js(page, FOLLOWS_SCREEN, timeout=15_000, polling=250)
    wait_js(page, f"({CANVAS_COLOURS})() >= 2", timeout=30_000, polling=250)
    through_the_gateway(sockets, session_id, "screen")
    box = page.locator("#screen canvas").bounding_box()
    assert box is not None
    return box


def drawer_opens_and_closes(page, width: int) -> None:
    """Controls opens the drawer (a 320 px side panel, or the phone's whole width) and moves
    the focus into it; Escape closes it and gives the focus back to the button."""
    toggle = page.locator("#drawer-toggle")
    assert toggle.get_attribute("aria-expanded") == "false" and page.is_hidden("#drawer")
    toggle.focus()
    page.keyboard.press("Enter")
    assert toggle.get_attribute("aria-expanded") == "true" and page.is_visible("#drawer")
    assert page.evaluate("document.activeElement.id") == "drawer-close"
    box = page.locator("#drawer").bounding_box()
    assert box is not None
    client = page.evaluate("document.documentElement.clientWidth")
    assert abs(box["x"] + box["width"] - client) <= 1, box  # at the right edge
    expected = 320 if width > 600 else client
    assert abs(box["width"] - expected) <= 1, (width, box)
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    page.keyboard.press("Escape")
    assert toggle.get_attribute("aria-expanded") == "false" and page.is_hidden("#drawer")
    assert page.evaluate("document.activeElement.id") == "drawer-toggle"
    toggle.click()
    assert page.is_visible("#drawer")


def time_shown(page, session_id: int, left: str, ends: str) -> None:
    """The time left counts down; the end time is the session's, in ada's zone."""
    ends_at = session_of(session_id).ends_at
    assert ends_at is not None
    text = page.inner_text("#drawer-left")
    assert text.startswith(left), text
    first = text
    wait_js(page, "(t) => document.getElementById('drawer-left').textContent !== t", first)
    assert page.inner_text("#drawer-ends") == f"{ends}{hhmm(ends_at)}"


def test_the_drawer_in_english_extends_and_shares_the_clipboard(
    running_desktop, docker_engine, new_page
):
    session_id = running_desktop
    page = new_page()  # no touch
    log_in(page, "ada", "pw-ada")
    box = open_the_desktop(page, session_id)
    assert page.is_hidden("#keyboard-toggle")  # not a touch device

    drawer_opens_and_closes(page, LAPTOP["width"])
    time_shown(page, session_id, "Time left: ", "Ends at ")
    violations = check_axe(page, "student-desktop-drawer-1280")
    assert not violations, describe(violations)

    # Extend: the new limit, in the DB, the audit trail, the API and the drawer.
    before = session_of(session_id).ends_at
    assert before is not None
    extend = page.locator("#drawer-extend")
    assert extend.inner_text() == f"Extend by {STEP_MINUTES} min" and extend.is_enabled()
    extend.click()
    wait_js(page, "() => document.getElementById('drawer-extend-answer').textContent !== ''")
    after = session_of(session_id)
    assert after.extended_minutes == STEP_MINUTES and after.ends_at
    assert after.ends_at == before + timedelta(minutes=STEP_MINUTES)
    answer = page.inner_text("#drawer-extend-answer")
    assert answer == f"Extended: this desktop now ends at {hhmm(after.ends_at)}.", answer
    audit = AuditEvent.objects.filter(session_id=session_id, kind=AuditKind.SESSION_EXTENDED)
    assert [(e.actor, e.data["minutes"]) for e in audit] == [("user:ada", STEP_MINUTES)]
    api = page.evaluate(
        "async (url) => (await fetch(url, {credentials: 'same-origin'})).json()",
        f"/api/v1/sessions/{session_id}/",
    )
    assert datetime.fromisoformat(api["ends_at"]) == after.ends_at
    assert page.inner_text("#drawer-ends") == f"Ends at {hhmm(after.ends_at)}"
    # 30 + 10 = the profile's 40: no more, and the drawer says why before anyone asks.
    assert extend.is_disabled()
    assert page.inner_text("#drawer-extend-why") == (
        f"This desktop cannot be given more time: {STEP_MINUTES} more minutes would take it "
        f"past its profile's maximum of {TOTAL_MINUTES} minutes."
    )

    # Upload: a file from this device into the home, through the node's agent (a real Docker
    # volume); the running desktop sees it at once, and the upload is audited.
    page.set_input_files(
        "#drawer-upload-file",
        files=[{"name": "from-laptop.txt", "mimeType": "text/plain", "buffer": b"up-ok\n"}],
    )
    page.click("#drawer-upload-send")
    wait_js(
        page,
        "() => document.getElementById('drawer-upload-note').textContent"
        " === 'Uploaded from-laptop.txt.'",
    )
    assert desktop_file(docker_engine, session_id, "from-laptop.txt") == b"up-ok\n"
    uploads = AuditEvent.objects.filter(kind=AuditKind.HOME_UPLOADED)
    assert [(e.actor, e.data["path"], e.data["size"]) for e in uploads] == [
        ("user:ada", "from-laptop.txt", 6)
    ]
    assert page.input_value("#drawer-upload-file") == ""  # the form is ready for the next

    # The clipboard, to the desktop: the panel's text becomes the desktop's selection, which
    # a middle click pastes into the xterm's shell. The paste comes when the xterm has asked
    # the browser for it, so Enter is pressed until the command has run (an Enter before it
    # is only an empty command line).
    x, y = box["x"] + XTERM_FIRST_LINE[0], box["y"] + XTERM_FIRST_LINE[1]
    page.fill("#clipboard-text", "echo clip-ok > ~/clip.txt")
    page.click("#clipboard-send")
    assert page.inner_text("#clipboard-note") == "Sent to the desktop's clipboard."
    page.click("#drawer-close")
    page.mouse.click(x, y, button="middle")

    def ran() -> bool:
        page.keyboard.press("Enter")  # to the desktop: the canvas has the focus
        page.wait_for_timeout(300)
        return desktop_file(docker_engine, session_id, "clip.txt") == b"clip-ok\n"

    try:
        wait_for(ran, 20, "the pasted command's file")
    finally:
        page.screenshot(path=str(OUTPUT / "e2e-desktop-clipboard.png"))
    # From the desktop: the xterm's first line (its first prompt), selected by a triple
    # click, lands in the panel.
    page.mouse.click(x, y, click_count=3)
    wait_js(page, "() => document.getElementById('clipboard-text').value.startsWith('desktop@')")
    assert page.inner_text("#clipboard-note") == "Copied from the desktop."

    # At a phone's width the drawer lies over the whole desktop.
    page.set_viewport_size(PHONE)
    wait_js(page, FOLLOWS_SCREEN, timeout=15_000, polling=250)
    drawer_opens_and_closes(page, PHONE["width"])
    violations = check_axe(page, "student-desktop-drawer-390")
    assert not violations, describe(violations)
    page.screenshot(path=str(OUTPUT / "e2e-desktop-drawer-390.png"))


def test_the_drawer_in_chinese_types_on_a_phone_and_stops(
    running_desktop, owner, docker_engine, new_page
):
    session_id = running_desktop
    save_preferences(owner, language="zh-hans")
    page = new_page(viewport=PHONE, has_touch=True)
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    log_in(page, "ada", "pw-ada")
    box = open_the_desktop(page, session_id)

    drawer_opens_and_closes(page, PHONE["width"])
    assert page.inner_text("#drawer-toggle") == "控制"
    time_shown(page, session_id, "剩余时间：", "结束时间：")
    assert page.inner_text("#drawer-extend") == f"延长 {STEP_MINUTES} 分钟"
    assert page.inner_text("#drawer-upload-send") == "上传"
    page.click("#drawer-close")

    # The on-screen keyboard: only on a touch device; its button raises the phone's keyboard
    # (the field out of sight takes the focus) and what is typed reaches the desktop: text,
    # a Backspace and Enter.
    keyboard = page.locator("#keyboard-toggle")
    assert keyboard.is_visible() and keyboard.inner_text() == "键盘"
    page.mouse.click(box["x"] + XTERM_FIRST_LINE[0], box["y"] + XTERM_FIRST_LINE[1])
    keyboard.tap()
    assert page.evaluate("document.activeElement.id") == "keyboard-input"
    assert keyboard.get_attribute("aria-pressed") == "true"
    page.keyboard.type("echo kbd-okX")
    page.keyboard.press("Backspace")
    page.keyboard.type(" > ~/typed.txt")
    page.keyboard.press("Enter")
    wait_for(
        lambda: desktop_file(docker_engine, session_id, "typed.txt") == b"kbd-ok\n",
        20,
        "the typed command's file",
    )
    page.screenshot(path=str(OUTPUT / "e2e-desktop-keyboard-390.png"))

    # Chinese at a laptop's width: the side panel.
    page.set_viewport_size(LAPTOP)
    drawer_opens_and_closes(page, LAPTOP["width"])
    violations = check_axe(page, "student-desktop-drawer-1280-zh")
    assert not violations, describe(violations)

    # Stop asks in the page first; keeping it running changes nothing.
    page.click("#drawer-stop")
    assert page.is_visible("#stop-confirm")
    assert page.inner_text("#stop-question").startswith("停止这个桌面？")
    assert page.evaluate("document.activeElement.id") == "stop-no"
    page.click("#stop-no")
    assert page.is_hidden("#stop-confirm") and page.is_visible("#drawer-stop")
    assert session_of(session_id).state == "RUNNING"
    page.click("#drawer-stop")
    page.click("#stop-yes")
    wait_for(lambda: session_of(session_id).state == "ENDED", 30, "ENDED")
    wait_js(
        page, "() => document.getElementById('drawer-state').textContent === '当前状态：已结束'"
    )
    assert page.is_disabled("#drawer-stop") and page.is_disabled("#drawer-extend")
    assert page.inner_text("#drawer-left") == ""
    asked = AuditEvent.objects.filter(
        session_id=session_id, actor="user:ada", kind=AuditKind.SESSION_TRANSITION
    )
    assert [(e.data["from"], e.data["to"]) for e in asked] == [("RUNNING", "STOPPING")]
    assert dialogs == []  # never the browser's own dialog
