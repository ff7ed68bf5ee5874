"""The pages' part of the time limit and the idle warning (issue 15): the warned notice names
the suspension time (the warning + the policy's suspend_after) in the person's zone, on the
page, in live updates and in the API; the desktop page carries the banner and what its script
needs (the API's extend action, the zone, the words); the page forms post to the page URLs.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.test import Client
from django.utils import timezone, translation

from people.preferences import save_preferences
from portal.kit.session_fragment import render_session
from scheduling.events import session_payload
from scheduling.idle_lookup import suspends_at
from scheduling.models import IdlePolicy, Node, Session
from scheduling.services.idle import do_idle_sweep
from scheduling.services.session_activity import record_usage
from tests.portal.api.test_api import client_for
from tests.scheduling.test_lifecycle import run_desktop, started_ago

pytestmark = [pytest.mark.django_db, pytest.mark.lifecycle]

ZONE = "Asia/Kathmandu"  # UTC+05:45: a time shown in UTC would not match


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def warned_at(session: Session, when: datetime) -> Session:
    Session.objects.filter(pk=session.pk).update(idle_state="warned", idle_since=when)
    return Session.objects.get(pk=session.pk)


def hhmm(moment: datetime, zone: str = ZONE) -> str:
    return moment.astimezone(ZoneInfo(zone)).strftime("%H:%M")


def page_config(html: str) -> dict:
    found = re.search(r'<script id="page-config" type="application/json">(.*?)</script>', html)
    assert found, "no page config"
    return json.loads(found.group(1))


def test_suspends_at_is_the_warning_plus_the_policy_that_applies(owner, profile, pool):
    session = run_desktop(owner, profile)
    assert suspends_at(session) is None  # active
    when = datetime(2026, 3, 2, 9, 50, tzinfo=UTC)
    session = warned_at(session, when)
    assert suspends_at(session) == when + timedelta(minutes=15)  # no row: the default
    IdlePolicy.objects.create(suspend_after=timedelta(minutes=40))  # any profile
    assert suspends_at(session) == when + timedelta(minutes=40)
    IdlePolicy.objects.create(profile=profile, suspend_after=timedelta(minutes=7))
    IdlePolicy.objects.create(purpose="thesis", suspend_after=timedelta(minutes=99))
    assert suspends_at(session) == when + timedelta(minutes=7)  # the profile's row wins
    Session.objects.filter(pk=session.pk).update(idle_state="suspended")
    assert suspends_at(Session.objects.get(pk=session.pk)) is None


def test_the_warned_notice_names_the_suspension_time_in_the_persons_zone(owner, profile, pool):
    save_preferences(owner, time_zone=ZONE)
    IdlePolicy.objects.create(profile=profile, suspend_after=timedelta(minutes=25))
    session = run_desktop(owner, profile)
    started_ago(session, 45)
    now = timezone.now()
    record_usage(session.pk, 0.0, 0.0, at=now)
    assert do_idle_sweep(now).warned == 1
    due = now + timedelta(minutes=25)
    page = signed_in(owner).get(f"/sessions/{session.pk}/").content.decode()
    note = page.split('id="idle-note"')[1].split("</p>")[0]
    assert 'data-idle="warned"' in note
    assert f"it will be suspended at {hhmm(due)} unless you use it." in note, note
    # The API and every live update carry it (the payload).
    body = client_for(owner).get(f"/api/v1/sessions/{session.pk}/").json()
    assert datetime.fromisoformat(body["idle"]["suspends_at"]) == due
    live = session_payload(Session.objects.get(pk=session.pk))
    with translation.override("en"), timezone.override(ZoneInfo("Asia/Tokyo")):
        html = render_session(live, "item")
    assert f"it will be suspended at {hhmm(due, 'Asia/Tokyo')} unless you use it." in html
    # Used again: no warning, no time.
    Session.objects.filter(pk=session.pk).update(idle_state="active", idle_since=None)
    page = signed_in(owner).get(f"/sessions/{session.pk}/").content.decode()
    assert 'id="idle-note"' not in page and "will be suspended at" not in page


def test_the_session_page_forms_post_to_the_page_urls_not_the_api(owner, profile, pool):
    session = run_desktop(owner, profile)
    page = signed_in(owner).get(f"/sessions/{session.pk}/").content.decode()
    assert f'action="/sessions/{session.pk}/extend/"' in page
    answer = signed_in(owner).post(f"/sessions/{session.pk}/extend/")
    assert (answer.status_code, answer["Location"]) == (302, f"/sessions/{session.pk}/")


def desktop_page(client: Client, session: Session) -> str:
    Node.objects.filter(pk=session.node_id).update(runtime="docker")  # a real desktop's page
    answer = client.get(f"/desktop/{session.pk}/")
    assert answer.status_code == 200
    return answer.content.decode()


def test_the_desktop_page_carries_the_banner_and_what_its_script_needs(owner, profile, pool):
    save_preferences(owner, time_zone=ZONE)
    session = run_desktop(owner, profile)
    when = timezone.now()
    warned_at(session, when)
    html = desktop_page(signed_in(owner), session)
    for part in ('id="desktop-banner"', 'id="banner-text"', 'id="banner-left"'):
        assert part in html, part
    assert re.search(r'<button type="button" id="banner-extend"[^>]*hidden>Extend</button>', html)
    assert f'id="banner-resume" href="/sessions/{session.pk}/"' in html
    assert "{#" not in html and "{%" not in html  # no template syntax left over
    assert "<style" not in html and not re.search(r"<script(?![^>]*(src=|application/json))", html)
    config = page_config(html)
    assert config["extend_api"] == f"/api/v1/sessions/{session.pk}/extend/"
    assert config["session_api"] == f"/api/v1/sessions/{session.pk}/"
    assert (config["time_zone"], config["can_extend"], config["warn_minutes"]) == (
        ZONE,
        True,
        [15, 5],
    )
    assert config["csrf_token"]
    shown = config["session"]
    assert datetime.fromisoformat(shown["ends_at"]) == session.started_at + timedelta(hours=4)
    assert shown["idle"]["state"] == "warned"
    assert datetime.fromisoformat(shown["idle"]["suspends_at"]) == when + timedelta(minutes=15)
    words = config["words"]
    assert words["limit_soon"] % {"minutes": 5, "time": "10:07"} == (
        "This desktop reaches its time limit in less than 5 minutes, at 10:07: save your work."
    )
    assert words["idle_warned"] % {"time": "10:07"} == (
        "This desktop has not been used for a while: it will be suspended at 10:07 unless "
        "you use it."
    )
    assert "%(time)s" in words["extended"] and words["suspended"] and words["extend_failed"]


def test_the_desktop_page_speaks_the_persons_language(owner, profile, pool):
    save_preferences(owner, language="zh-hans")
    session = run_desktop(owner, profile)
    html = desktop_page(signed_in(owner), session)
    config = page_config(html)
    assert config["words"]["extended"] == "已延长：这个桌面现在在 %(time)s 结束。"
    assert re.search(r'id="banner-extend"[^>]*>延长</button>', html)
    assert config["time_zone"] == "UTC"  # none saved: the campus default


def test_no_extend_on_the_desktop_page_where_the_profile_has_no_step(owner, profile, pool):
    profile.extend_step_minutes = 0
    profile.save(update_fields=["extend_step_minutes"])
    session = run_desktop(owner, profile)
    assert page_config(desktop_page(signed_in(owner), session))["can_extend"] is False


def test_another_persons_desktop_page_is_404(owner, stranger, profile, pool):
    session = run_desktop(owner, profile)
    assert signed_in(stranger).get(f"/desktop/{session.pk}/").status_code == 404
