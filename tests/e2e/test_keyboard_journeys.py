"""A student's journey with the keyboard only, in a real browser (issue 38): sign in, ask for a
desktop, hear that it is ready, open it, reach its screen and leave it (Ctrl+Alt+Shift), use
the drawer (the clipboard) and stop the desktop from it. Nothing is clicked or filled in:
every step is a key press through ``page.keyboard`` (the staff's journeys:
test_keyboard_journeys_staff.py).

Everything is real: daphne portal, Celery worker, a Docker agent and deskpool/tiny (Xvnc and
one xterm); chromium (Playwright) in front. The agent starts once the request waits, so the
page follows the desktop from the queue to ready live.
"""

from __future__ import annotations

import re

import pytest

from scheduling.models import Session
from scheduling.services.nodes import do_create_join_token
from tests.conftest import TEST_IMAGE

from ..integration.stack import wait_for, write_fleet
from .conftest import wait_js
from .test_browser import expect_state, open_desktop

pytestmark = [pytest.mark.browser, pytest.mark.integration, pytest.mark.docker]

# The focused element: its id, else its tag name (noVNC's canvas has no id).
ACTIVE = """() => {
  const active = document.activeElement;
  return active ? active.id || active.tagName : null;
}"""
MATCHES = "(css) => !!document.activeElement && document.activeElement.matches(css)"


def tab_to(page, css: str, *, back: bool = False, limit: int = 60) -> None:
    """Press Tab (Shift+Tab with ``back``) until the focused element matches ``css``."""
    key = "Shift+Tab" if back else "Tab"
    path = []
    for _ in range(limit):
        page.keyboard.press(key)
        if page.evaluate(MATCHES, css):
            return
        path.append(page.evaluate(ACTIVE))
    raise AssertionError(f"{key} never reached {css}: {path}")


def press_and_wait(page, key: str) -> None:
    """A key that follows a link or sends a form: the next page loaded."""
    with page.expect_navigation():
        page.keyboard.press(key)


def test_student_journey(stack, owner, profile, docker_engine, require_image, new_page, tmp_path):
    require_image(TEST_IMAGE)
    page = new_page()

    # Sign in: the fields and the button reached with Tab.
    page.goto("/login/")
    tab_to(page, "input[name=username]")
    page.keyboard.type("ada")
    tab_to(page, "input[name=password]")
    page.keyboard.type("pw-ada")
    press_and_wait(page, "Enter")
    assert page.url == f"{stack.url}/", page.url

    # Ask for a hobby desktop: the purpose chosen with the arrow keys, sent with Enter.
    tab_to(page, f"#profile-{profile.pk}")
    tab_to(page, "input[name=purpose]")
    for _ in range(4):
        if page.evaluate("() => document.getElementById('purpose-hobby').checked"):
            break
        page.keyboard.press("ArrowRight")
    assert page.evaluate(MATCHES, "#purpose-hobby:checked")
    tab_to(page, "#submit-form button[type=submit]")
    press_and_wait(page, "Enter")
    match = re.search(r"/sessions/(\d+)/$", page.url)
    assert match, page.url
    session_id = int(match.group(1))
    assert page.get_attribute("#state", "data-state") == "QUEUED"
    live = page.evaluate("JSON.parse(document.getElementById('page-config').textContent)")
    wait_js(page, f"document.getElementById('live').textContent === {live['words']['live']!r}")

    # A node comes: the desktop starts, and the page says it is ready, politely.
    stack.start_agent(
        do_create_join_token(stack.node, actor="test"),
        write_fleet(tmp_path / "fleet.yaml", stack.node, 1),
    )
    expect_state(page, "RUNNING", 120)
    ready = f"Desktop #{session_id} is ready to open."
    wait_js(page, "(w) => document.getElementById('announcer').textContent.startsWith(w)", ready)
    assert page.get_attribute("#announcer", "aria-live") == "polite"

    # Open it: the link reached with Tab, followed with Enter; the screen connects.
    tab_to(page, "#open-desktop")
    open_desktop(page, session_id, follow=lambda: page.keyboard.press("Enter"))

    # The screen is reached with Tab and keeps Tab; Ctrl+Alt+Shift leaves it for Controls.
    tab_to(page, "#screen canvas")
    page.keyboard.press("Tab")
    assert page.evaluate(ACTIVE) == "CANVAS"
    page.keyboard.press("Control+Alt+Shift")
    assert page.evaluate(ACTIVE) == "drawer-toggle"

    # The drawer: opened with Enter (the focus in it); text sent through its clipboard.
    page.keyboard.press("Enter")
    assert page.is_visible("#drawer") and page.evaluate(ACTIVE) == "drawer-close"
    tab_to(page, "#clipboard-text")
    page.keyboard.type("keyboard only")
    tab_to(page, "#clipboard-send")
    page.keyboard.press("Enter")
    sent = page.evaluate("JSON.parse(document.getElementById('page-config').textContent)")
    assert page.text_content("#clipboard-note") == sent["words"]["sent"]

    # Stop it from the drawer: asked in the page (the focus on Keep it running), then stopped.
    tab_to(page, "#drawer-stop", back=True)
    page.keyboard.press("Enter")
    assert page.evaluate(ACTIVE) == "stop-no"
    page.keyboard.press("Shift+Tab")
    assert page.evaluate(ACTIVE) == "stop-yes"
    page.keyboard.press("Enter")
    wait_for(
        lambda: Session.objects.get(pk=session_id).state in ("STOPPING", "ENDED"), 30, "stopped"
    )
    page.wait_for_selector("#desktop-ended", state="visible", timeout=60_000)
    assert page.evaluate(ACTIVE) == "ended-title"
    assert Session.objects.get(pk=session_id).state in ("STOPPING", "ENDED")
