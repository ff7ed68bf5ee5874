"""The home page and its destructive buttons in a real browser: Stop asks first (dismissed,
the desktop keeps running; accepted, it stops), the first desktop card is on the first
screen on a laptop and on a phone, in English and in Chinese, and "New desktop" is disabled
with its reason at the open-session limit."""

from __future__ import annotations

import pytest
from django.utils import timezone

from people.models import Member
from scheduling.models import Session
from scheduling.services.sessions import MAX_OPEN_SESSIONS_PER_USER

from .conftest import log_in, wait_js

WIDTHS = {"phone": (390, 844), "laptop": (1280, 900)}
REASON = {
    "en": "You have {n} of {n} desktops open; stop one to start another.",
    "zh-hans": "你已打开 {n} 个桌面（上限 {n} 个）；请先停止一个再新建。",
}


def running(user, profile) -> Session:
    return Session.objects.create(
        user=user, profile=profile, purpose="hobby", state="RUNNING", started_at=timezone.now()
    )


@pytest.mark.browser
@pytest.mark.integration
def test_stop_asks_first_and_only_an_accepted_dialog_stops_the_desktop(
    stack, owner, profile, new_page
):
    session = running(owner, profile)
    page = new_page()
    log_in(page, "ada", "pw-ada")
    card = f'.session-card[data-session-id="{session.pk}"]'
    asked: list[str] = []

    def dismiss(dialog) -> None:
        asked.append(dialog.message)
        dialog.dismiss()

    posted: list[str] = []
    page.on("request", lambda r: r.method == "POST" and posted.append(r.url))
    marker = page.evaluate("window.__marker = Math.random().toString(36).slice(2)")
    page.once("dialog", dismiss)
    page.click(f"{card} button.danger")
    # A round trip after the click: a form sent meanwhile would have left this page.
    assert page.evaluate("fetch(location.href).then((r) => r.ok)")
    assert page.evaluate("window.__marker") == marker, "the page was left"
    assert posted == []
    assert asked == [
        "Stop this desktop? Unsaved work in open programs is lost; your home folder is kept."
    ]
    assert page.url.rstrip("/") == stack.url.rstrip("/")
    session.refresh_from_db()
    assert session.state == "RUNNING"

    page.once("dialog", lambda dialog: dialog.accept())
    with page.expect_navigation():
        page.click(f"{card} button.danger")
    assert page.url.endswith(f"/sessions/{session.pk}/")
    session.refresh_from_db()
    assert session.state != "RUNNING"


@pytest.mark.browser
@pytest.mark.integration
@pytest.mark.parametrize("language", ["en", "zh-hans"])
def test_my_first_desktop_is_on_the_first_screen_and_new_desktop_says_why_not(
    stack, owner, profile, new_page, language
):
    Member.objects.update_or_create(user=owner, defaults={"language": language})
    first = running(owner, profile)
    page = new_page()
    log_in(page, "ada", "pw-ada")
    card = f'.session-card[data-session-id="{first.pk}"]'
    for name, (width, height) in WIDTHS.items():
        page.set_viewport_size({"width": width, "height": height})
        page.goto("/")
        assert page.get_attribute("html", "lang") == language
        top = page.evaluate(f"document.querySelector('{card}').getBoundingClientRect().top")
        assert 0 <= top < height, (name, top)
        # One desktop: the request form is folded behind "New desktop", which opens it.
        assert not page.is_visible("#submit-form")
        page.click("#new-desktop-toggle")
        assert page.is_visible("#submit-form")
        # The countdown ticks in the page's language.
        left = wait_js(page, f"document.querySelector('{card} [data-ends-at]').textContent")
        assert ("min left" if language == "en" else "剩余") in left, left

    for _ in range(MAX_OPEN_SESSIONS_PER_USER - 1):
        running(owner, profile)
    for name, (width, height) in WIDTHS.items():
        page.set_viewport_size({"width": width, "height": height})
        page.goto("/")
        button = page.locator("#new-desktop")
        assert button.is_disabled(), name
        reason = page.inner_text("#new-desktop-reason")
        assert reason == REASON[language].format(n=MAX_OPEN_SESSIONS_PER_USER)
        assert page.is_visible("#new-desktop-reason")
        top = page.evaluate(f"document.querySelector('{card}').getBoundingClientRect().top")
        assert 0 <= top < height, (name, top)
