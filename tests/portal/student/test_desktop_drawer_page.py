"""The desktop page's side drawer, as the server renders it (issue 27): one Controls button
that names the drawer it opens, the drawer holding the time, Extend, Stop (its question from
the page, not the browser), full screen and the clipboard; the on-screen keyboard's button
hidden until a touch device shows it; what the scripts need in the page's config, in the
reader's language. The browser's side: tests/e2e/test_desktop_drawer.py."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

import pytest

from people.preferences import save_preferences
from scheduling.models import DesktopProfile, Session
from tests.conftest import GATEWAY_PORT
from tests.portal.student.test_limit_pages import desktop_page, page_config, signed_in
from tests.scheduling.test_lifecycle import run_desktop

pytestmark = [pytest.mark.django_db, pytest.mark.lifecycle]


def drawer_of(html: str) -> str:
    found = re.search(r'<aside id="drawer".*?</aside>', html, re.S)
    assert found, "no drawer"
    return found.group(0)


def test_one_button_opens_the_drawer_that_holds_the_controls(owner, profile, pool):
    session = run_desktop(owner, profile)
    html = desktop_page(signed_in(owner), session)
    assert re.search(
        r'<button type="button" id="drawer-toggle" class="small" aria-expanded="false" '
        r'aria-controls="drawer">Controls</button>',
        html,
    )
    drawer = drawer_of(html)
    assert drawer.startswith(
        '<aside id="drawer" class="drawer" aria-labelledby="drawer-title" hidden>'
    )
    for part in (
        'id="drawer-left"',
        'id="drawer-ends"',
        ">Extend by 60 min</button>",
        'aria-describedby="drawer-extend-why"',
        'id="drawer-stop"',
        'id="fullscreen"',
        'id="clipboard-text"',
        'id="clipboard-send"',
        f'href="/sessions/{session.pk}/"',
    ):
        assert part in drawer, part
    # Stop asks in the page: the question and its answer, hidden until Stop is pressed.
    assert re.search(r'<div id="stop-confirm" role="group"[^>]*hidden>', drawer)
    assert (
        "Stop this desktop? Unsaved work in open programs is lost; your home folder is kept."
        in drawer
    )
    assert re.search(r'id="stop-yes"[^>]*>Stop the desktop</button>', drawer)
    assert "data-confirm" not in drawer  # not the browser's dialog (confirm.js)
    # The keyboard's button waits for a touch device; its field is out of sight, not hidden
    # (a hidden field cannot be focused, and the phone's keyboard would not come up).
    assert re.search(
        r'<button type="button" id="keyboard-toggle"[^>]*hidden>Keyboard</button>', html
    )
    field = re.search(r'<textarea id="keyboard-input"[^>]*>', html)
    assert field and "hidden" not in field.group(0) and 'class="keyboard-input"' in field.group(0)
    assert 'id="clipboard-toggle"' not in html  # the clipboard moved into the drawer
    # Under the CSP: no inline script or style.
    assert "<style" not in html and not re.search(r"<script(?![^>]*(src=|application/json))", html)
    assert not re.search(r"\son[a-z]+=", html)


def test_the_config_carries_stop_and_the_profiles_room(owner, profile, pool):
    DesktopProfile.objects.filter(pk=profile.pk).update(max_total_minutes=300)
    session = run_desktop(owner, profile)
    config = page_config(desktop_page(signed_in(owner), session))
    assert config["stop_api"] == f"/api/v1/sessions/{session.pk}/stop/"
    assert config["unstoppable"] == ["CANCELLED", "ENDED", "EXPIRED", "FAILED", "LOST", "STOPPING"]
    assert session.started_at
    last_end = datetime.fromisoformat(config["extend_last_end"])
    assert last_end == session.started_at + timedelta(minutes=300 - 60)
    assert config["extend_refusal"] == (
        "This desktop cannot be given more time: 60 more minutes would take it past its "
        "profile's maximum of 300 minutes."
    )
    assert config["states"]["STOPPING"] == "Stopping"
    words = config["words"]
    assert words["ends_at"] % {"time": "10:07"} == "Ends at 10:07"
    assert words["state"] % {"state": "Ended"} == "Where it stands: Ended"
    assert words["stop_failed"] and words["no_limit"] and words["not_running"]


def test_no_step_no_room_and_the_reason(owner, profile, pool):
    DesktopProfile.objects.filter(pk=profile.pk).update(extend_step_minutes=0)
    session = run_desktop(owner, profile)
    html = desktop_page(signed_in(owner), session)
    config = page_config(html)
    assert (config["can_extend"], config["extend_last_end"]) == (False, None)
    assert config["extend_refusal"] == "Desktops of this kind cannot be given more time."
    assert re.search(r'id="drawer-extend"[^>]*>Extend</button>', html)


def test_the_drawer_speaks_the_persons_language(owner, profile, pool):
    save_preferences(owner, language="zh-hans")
    session = run_desktop(owner, profile)
    html = desktop_page(signed_in(owner), session)
    assert re.search(r'id="drawer-toggle"[^>]*>控制</button>', html)
    assert re.search(r'id="keyboard-toggle"[^>]*>键盘</button>', html)
    drawer = drawer_of(html)
    assert re.search(r'id="drawer-extend"[^>]*>延长 60 分钟</button>', drawer)
    assert re.search(r'id="stop-no"[^>]*>继续运行</button>', drawer)
    config = page_config(html)
    assert config["states"]["ENDED"] == "已结束"
    assert config["words"]["ends_at"] == "结束时间：%(time)s"
    assert config["words"]["state"] == "当前状态：%(state)s"


def test_the_drawer_offers_sound_only_where_the_desktop_serves_it(owner, profile, pool):
    session = run_desktop(owner, profile)  # reported with a sound port; here, one without
    Session.objects.filter(pk=session.pk).update(desktop_audio_port=None)
    html = desktop_page(signed_in(owner), session)
    assert page_config(html)["has_sound"] is False
    assert 'id="sound-toggle"' not in html
    assert "This desktop has no sound: its image serves none." in drawer_of(html)

    Session.objects.filter(pk=session.pk).update(desktop_audio_port=32002)
    html = desktop_page(signed_in(owner), session)
    config = page_config(html)
    assert config["has_sound"] is True  # a sound ticket from the same endpoint as the screen's
    assert config["ticket_api"] == f"/api/v1/sessions/{session.pk}/ticket/"
    drawer = drawer_of(html)
    assert re.search(
        r'<button type="button" id="sound-toggle" class="small" aria-pressed="false">'
        r"Play the desktop's sound</button>",
        drawer,
    )
    assert '<meter id="sound-level" min="0" max="1" value="0"' in drawer
    assert "has no sound" not in drawer
    assert config["words"]["sound_stop"] == "Stop the sound"

    save_preferences(owner, language="zh-hans")
    html = desktop_page(signed_in(owner), session)
    assert re.search(r'id="sound-toggle"[^>]*>播放桌面声音</button>', html)
    assert page_config(html)["words"]["sound_none"] == "这个桌面没有声音。"


def test_the_page_may_reach_its_gateway_for_the_screen_and_for_uploads(gateway_desktop, owner):
    """Where the browser reaches the node's gateway directly (``make demo``, the tests), the
    page's connect-src allows its sockets and the drawer's upload (an http PUT)."""
    answer = signed_in(owner).get(f"/desktop/{gateway_desktop.pk}/")
    assert answer.status_code == 200
    connect = next(
        part.split()[1:]
        for part in answer["Content-Security-Policy"].split(";")
        if part.split() and part.split()[0] == "connect-src"
    )
    assert f"ws://127.0.0.1:{GATEWAY_PORT}" in connect
    assert f"http://127.0.0.1:{GATEWAY_PORT}" in connect
