"""The Accessibility page (/accessibility/) and the page frame every page shares
(templates/base.html): skip link, main target, aria-current, footer link, the messages' focus
target. The browser half (focus, the phone menu, axe, reduced motion) is
tests/e2e/test_page_frame.py."""

from __future__ import annotations

import re

import pytest
from django.test import Client, RequestFactory, override_settings

from portal.kit.navigation import is_current

pytestmark = pytest.mark.django_db

CONTACT = "access@example.edu"


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def current_links(html: str) -> list[str]:
    """The hrefs of the links marked aria-current="page"."""
    return re.findall(r'<a href="([^"]+)"[^>]*aria-current="page"', html)


@override_settings(ACCESSIBILITY_CONTACT=CONTACT)
def test_the_accessibility_page_is_open_signed_out_and_says_where_to_report():
    answer = Client().get("/accessibility/", HTTP_ACCEPT_LANGUAGE="en")
    assert answer.status_code == 200
    html = answer.content.decode()
    assert '<html lang="en">' in html
    assert re.search(r"<h1[^>]*>Accessibility</h1>", html)
    assert len(re.findall(r"<h1\b", html)) == 1
    assert "WCAG" in html and "Known limits" in html and "Report a barrier" in html
    assert f'<a href="mailto:{CONTACT}">{CONTACT}</a>' in html
    # The footer's link is the page shown.
    assert current_links(html) == ["/accessibility/"]


@override_settings(ACCESSIBILITY_CONTACT=CONTACT)
def test_the_accessibility_page_speaks_chinese(owner):
    """Passes once the zh-Hans catalogue holds the page's entries."""
    for client in (Client(), signed_in(owner)):
        html = client.get("/accessibility/", HTTP_ACCEPT_LANGUAGE="zh-Hans").content.decode()
        assert '<html lang="zh-hans">' in html
        assert re.search(r"<h1[^>]*>无障碍</h1>", html)
        assert "报告障碍" in html and "Report a barrier" not in html
        assert f'<a href="mailto:{CONTACT}">{CONTACT}</a>' in html
        assert '<a class="skip-link" href="#main">跳到主要内容</a>' in html


def test_the_contact_defaults_to_the_notices_sender_address(settings):
    # portal/settings.py: DESKPOOL_ACCESSIBILITY_CONTACT unset, DEFAULT_FROM_EMAIL's address.
    assert "@" in settings.ACCESSIBILITY_CONTACT and "<" not in settings.ACCESSIBILITY_CONTACT


def test_the_accessibility_page_only_reads():
    assert Client().post("/accessibility/").status_code == 405


@pytest.mark.parametrize("path", ["/login/", "/accessibility/"])
def test_a_signed_out_page_has_the_frame(path):
    html = Client().get(path, HTTP_ACCEPT_LANGUAGE="en").content.decode()
    body = html.split("<body>", 1)[1]
    # The skip link is the body's first focusable element and targets main.
    first_focusable = re.search(r"<(a|button|input|select|textarea)\b[^>]*>", body)
    assert first_focusable is not None
    assert first_focusable.group(0) == '<a class="skip-link" href="#main">'
    assert '<main id="main" tabindex="-1">' in html
    assert re.search(
        r'<footer class="site-footer">\s*<a href="/accessibility/"[^>]*>Accessibility</a>', html
    )
    # The phone menu's button names the navigation it opens.
    assert 'aria-controls="site-nav"' in html and '<nav id="site-nav"' in html


def test_the_navigation_marks_the_page_shown_and_only_it(owner):
    client = signed_in(owner)
    for path in ("/", "/history/", "/files/", "/account/"):
        html = client.get(path).content.decode()
        assert current_links(html) == [path], path
    # A page that is in no navigation marks nothing but the footer's link where it is shown.
    assert current_links(client.get("/accessibility/").content.decode()) == ["/accessibility/"]


def test_the_console_navigation_marks_the_console_page_shown(admin_user):
    client = signed_in(admin_user)
    # The overview is both the header's Console link and the console's first link.
    assert current_links(client.get("/console/").content.decode()) == ["/console/", "/console/"]
    html = client.get("/console/queue/").content.decode()
    assert current_links(html) == ["/console/queue/"]


def test_is_current_compares_the_resolved_view_name():
    request = RequestFactory().get("/history/")
    assert not is_current(request, "history")  # not resolved: no page is current
    request.resolver_match = type("Match", (), {"view_name": "history"})()
    assert is_current(request, "history") and not is_current(request, "home")
    assert not is_current(None, "home")


def test_a_message_is_rendered_in_the_focus_target(owner):
    client = signed_in(owner)
    answer = client.post("/account/", {"language": "en", "time_zone": "UTC"}, follow=True)
    html = answer.content.decode()
    assert answer.redirect_chain, html
    assert re.search(
        r'<div class="messages" id="messages" tabindex="-1"><p class="notice success" '
        r'role="status">Your settings are saved.</p></div>',
        html,
    )
    # No message, no focus target.
    assert 'id="messages"' not in client.get("/account/").content.decode()
