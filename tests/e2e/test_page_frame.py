"""The page frame every page shares (templates/base.html, static/deskpool/frame.js), in
chromium: the skip link, aria-current, the phone menu, the footer's Accessibility page (axe:
no violation of any impact), reduced motion, the focus ring, the message's focus.
The server-rendered half is tests/portal/student/test_accessibility_page.py."""

from __future__ import annotations

import json

import pytest

from .axe import REPORTS, check_axe
from .conftest import log_in

pytestmark = [pytest.mark.browser, pytest.mark.integration]

PHONE = {"width": 390, "height": 844}
LAPTOP = {"width": 1280, "height": 900}
ACCESSIBILITY = {"en": "Accessibility", "zh-hans": "无障碍"}  # zh-hans: once the catalogue has it

ACTIVE = """() => {
  const a = document.activeElement;
  return a ? {tag: a.tagName, id: a.id, cls: a.className, href: a.getAttribute("href")} : null;
}"""
# The contrast ratio (WCAG 2.x) of the focused element's outline with the ground around it:
# the background of the nearest ancestor that paints one.
FOCUS_RING = """() => {
  const lum = (rgb) => {
    const [r, g, b] = rgb.match(/[\\d.]+/g).slice(0, 3).map(Number).map((c) => {
      c /= 255;
      return c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4;
    });
    return 0.2126 * r + 0.7152 * g + 0.0722 * b;
  };
  const el = document.activeElement;
  const style = getComputedStyle(el);
  let ground = el.parentElement;
  while (ground && /rgba\\(.*, 0\\)|transparent/.test(getComputedStyle(ground).backgroundColor)) {
    ground = ground.parentElement;
  }
  const bg = ground ? getComputedStyle(ground).backgroundColor : "rgb(255, 255, 255)";
  const [l1, l2] = [lum(style.outlineColor), lum(bg)].sort((a, b) => b - a);
  return {style: style.outlineStyle, width: parseFloat(style.outlineWidth),
          ratio: (l1 + 0.05) / (l2 + 0.05)};
}"""


def active(page) -> dict:
    return page.evaluate(ACTIVE)


def tab_to(page, element_id: str, most: int = 8) -> None:
    """Press Tab until the element with ``element_id`` has the focus (at most ``most`` times)."""
    for _ in range(most):
        page.keyboard.press("Tab")
        if active(page)["id"] == element_id:
            return
    raise AssertionError(f"#{element_id} is not among the first {most} Tab stops")


def all_violations(page, name: str) -> list[dict]:
    """axe-core's violations of every impact (its report holds them all)."""
    check_axe(page, name)
    return json.loads((REPORTS / f"{name}.json").read_text(encoding="utf-8"))["violations"]


def test_the_skip_link_is_the_first_tab_stop_and_moves_the_focus_to_main(owner, new_page):
    page = new_page()
    log_in(page, "ada", "pw-ada")
    page.goto("/history/")
    skip = page.locator(".skip-link")
    assert not skip.is_visible() or skip.bounding_box()["y"] + skip.bounding_box()["height"] <= 0

    page.keyboard.press("Tab")
    assert active(page)["cls"] == "skip-link"
    box = skip.bounding_box()
    assert box is not None and box["y"] >= 0 and box["height"] > 0  # visible when focused
    page.keyboard.press("Enter")
    assert active(page)["id"] == "main"
    # The next Tab goes on inside main, past the header.
    page.keyboard.press("Tab")
    assert page.evaluate("document.getElementById('main').contains(document.activeElement)")
    ring = page.evaluate(FOCUS_RING)
    assert ring["style"] != "none" and ring["width"] >= 2 and ring["ratio"] >= 3, ring


def test_the_header_focus_ring_shows_on_the_dark_bar(owner, new_page):
    page = new_page()
    log_in(page, "ada", "pw-ada")
    page.keyboard.press("Tab")
    page.keyboard.press("Tab")  # the brand link, on the dark header
    assert active(page)["cls"] == "brand"
    ring = page.evaluate(FOCUS_RING)
    assert ring["style"] != "none" and ring["width"] >= 2 and ring["ratio"] >= 3, ring


def test_aria_current_marks_the_page_shown_in_both_navigations(owner, admin_user, new_page):
    page = new_page()
    log_in(page, "ada", "pw-ada")
    current = page.locator("header nav a[aria-current=page]")
    assert current.count() == 1 and current.get_attribute("href") == "/"
    with page.expect_navigation():
        page.locator("header nav a[href='/history/']").click()
    assert current.count() == 1 and current.get_attribute("href") == "/history/"

    admin = new_page()
    log_in(admin, "root", "pw-root")
    admin.goto("/console/queue/")
    console = admin.locator(".console-nav a[aria-current=page]")
    assert console.count() == 1 and console.get_attribute("href") == "/console/queue/"
    assert admin.locator("header nav a[aria-current=page]").count() == 0


def test_the_phone_header_folds_into_a_menu_the_keyboard_opens_and_escape_closes(owner, new_page):
    page = new_page()
    log_in(page, "ada", "pw-ada")
    page.goto("/history/")
    header_laptop = page.locator("header").bounding_box()["height"]
    button = page.locator("#menu-toggle")
    nav = page.locator("#site-nav")
    assert not button.is_visible() and nav.is_visible()  # 1280 px: the nav as before

    page.set_viewport_size(PHONE)
    page.goto("/history/")
    assert button.is_visible() and not nav.is_visible()
    assert button.get_attribute("aria-expanded") == "false"
    assert button.get_attribute("aria-controls") == "site-nav"
    header_phone = page.locator("header").bounding_box()["height"]
    print(f"header height: {header_laptop} px at 1280, {header_phone} px folded at 390 wide")
    assert header_phone <= PHONE["height"] / 8

    tab_to(page, "menu-toggle")
    page.keyboard.press("Enter")
    assert button.get_attribute("aria-expanded") == "true" and nav.is_visible()
    page.keyboard.press("Tab")  # into the opened navigation: its first link
    assert page.evaluate("document.getElementById('site-nav').contains(document.activeElement)")
    assert (
        page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")
        <= 0
    )
    page.keyboard.press("Escape")
    assert button.get_attribute("aria-expanded") == "false" and not nav.is_visible()
    assert active(page)["id"] == "menu-toggle"
    page.keyboard.press("Space")
    assert button.get_attribute("aria-expanded") == "true" and nav.is_visible()
    page.keyboard.press("Space")
    assert button.get_attribute("aria-expanded") == "false" and not nav.is_visible()


def test_without_javascript_the_phone_nav_stays_open(owner, new_page):
    page = new_page(java_script_enabled=False, viewport=PHONE)
    page.goto("/login/")
    assert page.locator("#site-nav").is_visible()
    assert not page.locator("#menu-toggle").is_visible()


@pytest.mark.parametrize("language", ["en", "zh-hans"])
def test_the_footer_leads_to_the_accessibility_page_without_axe_violations(language, new_page):
    """zh-hans passes once the catalogue holds the page's entries."""
    page = new_page(extra_http_headers={"Accept-Language": language})
    for viewport, name in ((LAPTOP, "laptop"), (PHONE, "phone")):
        page.set_viewport_size(viewport)
        page.goto("/login/")
        assert page.get_attribute("html", "lang") == language
        footer_link = page.locator("footer a[href='/accessibility/']")
        assert footer_link.inner_text() == ACCESSIBILITY[language]
        with page.expect_navigation():
            footer_link.click()
        assert page.url.endswith("/accessibility/")
        assert page.locator("h1").all_inner_texts() == [ACCESSIBILITY[language]]
        assert page.locator("main a[href^='mailto:']").count() == 1
        violations = all_violations(page, f"accessibility-{language}-{name}")
        assert violations == [], violations
        if name == "phone":  # and with the menu open
            page.locator("#menu-toggle").click()
            violations = all_violations(page, f"accessibility-{language}-{name}-menu")
            assert violations == [], violations


def test_reduced_motion_stops_the_spinner_and_every_animation(owner, new_page):
    page = new_page()
    log_in(page, "ada", "pw-ada")
    page.goto("/files/")
    # A spinner as the Files page shows while a node works, and an element that animates and
    # glides by its own inline style (the rule must reach that too).
    page.evaluate("""() => {
      const main = document.getElementById("main");
      main.insertAdjacentHTML("beforeend",
        '<span class="spinner" id="t-spinner"></span><span id="t-moving">x</span>');
      const moving = document.getElementById("t-moving");
      moving.style.animation = "files-spin 2s linear infinite";
      moving.style.transition = "opacity 1s";
    }""")
    motion = """() => {
      const s = getComputedStyle(document.getElementById("t-spinner"));
      const m = getComputedStyle(document.getElementById("t-moving"));
      return [s.animationName, m.animationName, m.transitionDuration];
    }"""
    page.emulate_media(reduced_motion="no-preference")
    assert page.evaluate(motion) == ["files-spin", "files-spin", "1s"]
    page.emulate_media(reduced_motion="reduce")
    assert page.evaluate(motion) == ["none", "none", "0s"]


def test_after_a_saved_form_its_message_has_the_focus(owner, new_page):
    page = new_page()
    log_in(page, "ada", "pw-ada")
    page.goto("/account/")
    with page.expect_navigation():
        page.locator("#preferences-form button[type=submit]").click()
    page.wait_for_load_state("load")
    messages = page.locator("#messages")
    assert messages.locator("[role=status]").count() == 1
    assert active(page)["id"] == "messages"
    # The next Tab goes on from the message, not from the top of the page.
    page.keyboard.press("Tab")
    assert page.evaluate("document.getElementById('main').contains(document.activeElement)")
