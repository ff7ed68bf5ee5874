"""The student's pages in a real browser: no axe-core violations on a phone (390 px wide)
and on a laptop, the request form usable from the keyboard, and the desktop page's timer,
time-limit banner, clipboard panel and reconnection after the portal drops."""

from __future__ import annotations

import threading
from contextlib import suppress

import pytest
from django.db import connections

from scheduling.services.nodes import do_create_join_token

from ..integration.stack import write_fleet
from .axe import check_axe, describe
from .conftest import log_in, wait_js
from .test_browser import DESKTOP_IMAGE, expect_state, open_desktop

# Record every text #desktop-status shows and plant a marker that a reload would wipe out.
WATCH_STATUS = """
() => {
  const status = document.getElementById("desktop-status");
  window.__statuses = [status.textContent];
  new MutationObserver(() => window.__statuses.push(status.textContent))
    .observe(status, {childList: true, characterData: true, subtree: true});
  window.__marker = Math.random().toString(36).slice(2);
  return window.__marker;
}
"""
WIDTHS = {"phone": (390, 844), "laptop": (1280, 900)}


@pytest.fixture
def adas_queued_session(stack, owner, profile):
    """A queued hobby request of ada's, made before the browser starts."""
    from scheduling.services.sessions import check_submit, do_submit

    return do_submit(owner, check_submit(owner, profile.pk, "hobby", None))


@pytest.mark.browser
@pytest.mark.integration
@pytest.mark.parametrize("width", sorted(WIDTHS))
def test_the_student_pages_pass_axe(adas_queued_session, new_page, width):
    page = new_page()
    page.set_viewport_size(dict(zip(("width", "height"), WIDTHS[width], strict=True)))
    log_in(page, "ada", "pw-ada")
    session_id = adas_queued_session.pk
    for name, path in (
        ("home", "/"),
        ("session", f"/sessions/{session_id}/"),
        ("history", "/history/"),
    ):
        assert page.goto(path).status == 200
        violations = check_axe(page, f"student-{name}-{width}")
        assert not violations, describe(violations)
        # Nothing wider than the screen: no sideways scrolling on a phone.
        overflow = page.evaluate(
            "document.documentElement.scrollWidth - document.documentElement.clientWidth"
        )
        assert overflow <= 0, (path, overflow)


@pytest.mark.browser
@pytest.mark.integration
def test_the_home_page_follows_my_session_live(adas_queued_session, owner, new_page):
    from scheduling.services.sessions import do_stop

    page = new_page()
    log_in(page, "ada", "pw-ada")
    card = f'.session-card[data-session-id="{adas_queued_session.pk}"]'
    assert page.get_attribute(f"{card} [data-live=state]", "data-state") == "QUEUED"
    wait_js(page, "document.getElementById('live').textContent === 'live'")
    marker = page.evaluate("window.__marker = Math.random().toString(36).slice(2)")

    # Cancelled as from another tab. In a thread of its own: this one runs Playwright's event
    # loop, in which the broadcast's async_to_sync may not run.
    def cancel_elsewhere() -> None:
        try:
            do_stop(owner, adas_queued_session)
        finally:
            connections.close_all()

    cancel = threading.Thread(target=cancel_elsewhere)
    cancel.start()
    cancel.join()

    wait_js(
        page,
        f"""document.querySelector('{card} [data-live=state]').dataset.state === 'CANCELLED'""",
    )
    assert page.evaluate("window.__marker") == marker, "the page was reloaded"
    assert page.locator(f"{card} button").count() == 0  # nothing left to cancel or stop


@pytest.mark.browser
@pytest.mark.integration
def test_a_refused_request_is_announced_next_to_its_field(stack, owner, profile, new_page):
    page = new_page()
    log_in(page, "ada", "pw-ada")
    # Keyboard only: the course list, then submit coursework without a course.
    page.focus(f"#profile-{profile.pk}")
    page.keyboard.press("Space")
    page.evaluate("document.getElementById('purpose-hobby').checked = false")
    with page.expect_navigation():
        page.focus("#submit-form button[type=submit]")
        page.keyboard.press("Enter")
    # Hobby unticked by hand: the form names the purpose as the field at fault.
    described = page.get_attribute("input[name=purpose]", "aria-describedby") or ""
    assert "purpose-error" in described
    assert page.is_visible("#purpose-error")
    violations = check_axe(page, "student-home-refused")
    assert not violations, describe(violations)


@pytest.fixture
def short_desktop(db):
    """The XFCE desktop with a 10-minute time limit: its banner shows as soon as it runs."""
    from scheduling.models import DesktopProfile

    return DesktopProfile.objects.create(
        slug="xfce-short",
        name="XFCE short",
        image=DESKTOP_IMAGE,
        cpus=1,
        memory_mb=2048,
        gpu_count=1,
        gpu_memory_min_mb=4000,
        allowed_kinds=["mig"],
        max_duration_minutes=10,
    )


@pytest.mark.browser
@pytest.mark.integration
@pytest.mark.docker
def test_the_desktop_page_times_warns_shares_the_clipboard_and_outlives_a_portal_blip(
    stack, owner, short_desktop, docker_engine, require_image, tmp_path, new_page
):
    require_image(DESKTOP_IMAGE)
    page = new_page()
    log_in(page, "ada", "pw-ada")
    page.check(f"#profile-{short_desktop.pk}")
    page.check("#purpose-hobby")
    with page.expect_navigation():
        page.click("#submit-form button[type=submit]")
    session_id = int(page.url.rstrip("/").rsplit("/", 1)[1])
    try:
        stack.start_agent(
            do_create_join_token(stack.node, actor="test"),
            write_fleet(tmp_path / "fleet.yaml", stack.node, 1),
        )
        expect_state(page, "RUNNING", timeout_s=90)
        open_desktop(page, session_id)

        assert page.inner_text("#session-timer").startswith("Time left: ")
        banner = page.inner_text("#desktop-banner")
        assert "time limit in less than 15 minutes" in banner, banner

        # The desktop's clipboard lands in the panel (in the drawer); its text goes to the
        # desktop.
        page.click("#drawer-toggle")
        page.evaluate(
            """() => window.deskpoolRfb.dispatchEvent(
                 new CustomEvent("clipboard", {detail: {text: "from the desktop"}}))"""
        )
        assert page.input_value("#clipboard-text") == "from the desktop"
        page.fill("#clipboard-text", "to the desktop")
        page.click("#clipboard-send")
        assert page.inner_text("#clipboard-note") == "Sent to the desktop's clipboard."
        violations = check_axe(page, "student-desktop")
        assert not violations, describe(violations)

        # A blip: the portal goes away for two seconds. The screen does not pass through it
        # (the node's gateway carries it): it stays connected, and still gets frames.
        marker = page.evaluate(WATCH_STATUS)
        stack.restart_portal(down_s=2)  # returns once the portal answers again
        page.wait_for_timeout(1000)
        assert page.evaluate("window.__statuses") == ["connected"]  # never lost
        assert page.evaluate("window.__marker") == marker, "the page was reloaded"
    finally:
        from scheduling.models import Session

        volume = Session.objects.get(pk=session_id).home_volume
        if volume:
            with suppress(Exception):
                docker_engine.volumes.get(volume).remove(force=True)
