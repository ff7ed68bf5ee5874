"""The home page puts my desktops first, each with the time it has left, and keeps the request
form behind "New desktop": open when I have none, disabled with the reason at the limit."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone, translation

from people.models import Course, Member, Role, ThesisGrant
from scheduling.models import Session
from scheduling.services.sessions import MAX_OPEN_SESSIONS_PER_USER

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _default_language_and_zone_after():
    yield
    translation.deactivate()
    timezone.deactivate()


def home(user, language: str = "en") -> str:
    client = Client(HTTP_ACCEPT_LANGUAGE=language)
    client.force_login(user)
    return client.get("/").content.decode()


def running(user, profile) -> Session:
    """Started 30 minutes ago on a profile with a time limit (max_duration_minutes)."""
    return Session.objects.create(
        user=user,
        profile=profile,
        purpose="hobby",
        state="RUNNING",
        started_at=timezone.now() - timedelta(minutes=30),
    )


def test_my_desktops_come_before_the_request_form(owner, profile):
    session = running(owner, profile)
    page = home(owner)
    assert page.index(f'data-session-id="{session.pk}"') < page.index('id="submit-form"')
    assert '<h1 id="sessions-title">My desktops</h1>' in page


def test_each_desktop_shows_when_it_ends_in_my_zone_and_the_time_left(owner, profile):
    Member.objects.create(user=owner, time_zone="Asia/Shanghai")
    session = running(owner, profile)
    ends = timezone.localtime(session.ends_at, timezone=timezone.get_fixed_timezone(8 * 60))
    page = home(owner)
    assert f'>{ends:%Y-%m-%d %H:%M}</time> <span class="hint">(Asia/Shanghai)</span>' in page
    left = profile.max_duration_minutes - 30
    expected = f"{left // 60} h {left % 60} min left" if left >= 60 else f"{left} min left"
    assert "data-ends-at=" in page  # session.js counts it down
    assert expected in page
    chinese = home(owner, "zh-hans")
    assert f"{ends.year}年{ends.month}月{ends.day}日 {ends:%H:%M}" in chinese
    assert "剩余" in chinese


def test_the_form_is_open_when_i_have_no_desktop_and_folded_when_i_have_one(owner, profile):
    assert '<details class="new-desktop" id="new-desktop" open>' in home(owner)
    running(owner, profile)
    page = home(owner)
    assert '<details class="new-desktop" id="new-desktop">' in page
    assert '<summary class="button" id="new-desktop-toggle">New desktop</summary>' in page


def test_new_desktop_is_disabled_with_the_reason_at_the_open_session_limit(owner, profile):
    for _ in range(MAX_OPEN_SESSIONS_PER_USER):
        running(owner, profile)
    page = home(owner)
    assert (
        '<button type="button" id="new-desktop" disabled aria-describedby="new-desktop-reason">'
        "New desktop</button>" in page
    )
    limit = MAX_OPEN_SESSIONS_PER_USER
    assert f"You have {limit} of {limit} desktops open; stop one to start another." in page
    assert 'id="submit-form"' not in page
    chinese = home(owner, "zh-hans")
    assert "请先停止一个再新建" in chinese and "新建桌面" in chinese


def checked_purpose(html: str) -> str:
    [value] = re.findall(r'<input type="radio" name="purpose" value="(\w+)"[^>]* checked', html)
    return value


def selected_course(html: str) -> str | None:
    select = html.split('<select name="course"')[1].split("</select>")[0]
    found = re.findall(r'<option value="([^"]*)"[^>]* selected>', select)
    return found[0] if found else None


def test_the_form_starts_at_the_highest_purpose_the_person_may_use(owner, profile, make_user):
    """The walk (issue 38): a thesis student with a grant got Hobby preselected."""
    assert checked_purpose(home(owner)) == "hobby"
    course = Course.objects.create(code="cs101", title="Intro")
    course.students.add(owner)
    html = home(owner)
    assert checked_purpose(html) == "coursework" and selected_course(html) == "cs101"
    other = Course.objects.create(code="cs202", title="Systems")
    other.students.add(owner)
    html = home(owner)  # two courses: which one is the student's to say
    assert checked_purpose(html) == "coursework" and selected_course(html) is None
    advisor = make_user("prof")
    Member.objects.create(user=advisor, role=Role.FACULTY)
    ThesisGrant.objects.create(
        student=owner, granted_by=advisor, until=timezone.localdate() + timedelta(days=30)
    )
    assert checked_purpose(home(owner)) == "thesis"
