"""Destructive actions ask first (portal.kit.confirm): each button's form carries its question in
the reader's language for static/deskpool/confirm.js, and a POST that was not confirmed (no
JavaScript) changes nothing and gets a page asking the same question."""

from __future__ import annotations

from datetime import time, timedelta

import pytest
from django.test import Client
from django.utils import timezone, translation
from guardian.shortcuts import assign_perm

from people.models import Course
from scheduling.models import BookingSeries, Quota, Session, set_default_profile
from scheduling.services.booking_series import check_series, do_create_series
from tests.portal.teaching.test_booking_pages import next_monday

pytestmark = pytest.mark.django_db

STOP_EN = "Stop this desktop? Unsaved work in open programs is lost; your home folder is kept."


@pytest.fixture(autouse=True)
def _default_language_and_zone_after():
    yield
    translation.deactivate()
    timezone.deactivate()


def client(user, language: str = "en") -> Client:
    browser = Client(HTTP_ACCEPT_LANGUAGE=language)
    browser.force_login(user)
    return browser


@pytest.fixture
def running(owner, profile) -> Session:
    return Session.objects.create(
        user=owner,
        profile=profile,
        purpose="hobby",
        state="RUNNING",
        started_at=timezone.now(),
    )


@pytest.fixture
def course(owner, make_user, profile):
    course = Course.objects.create(code="cs-gpu101", title="GPUs")
    set_default_profile(course, profile)
    course.instructors.add(owner)
    li = make_user("liwei")
    li.first_name, li.last_name = "Li", "Wei"
    li.save()
    course.students.add(li)
    helper = make_user("tina")
    for perm in ("view_course", "view_live_class", "manage_class_desktops"):
        assign_perm(f"portal.{perm}", helper, course)
    for perm in ("view_live_class", "manage_class_desktops"):
        assign_perm(f"portal.{perm}", owner, course)
    return course


def test_the_stop_button_asks_what_is_lost_in_the_readers_language(owner, running):
    home = client(owner).get("/").content.decode()
    assert f'data-confirm="{STOP_EN}"' in home
    detail = client(owner).get(f"/sessions/{running.pk}/").content.decode()
    assert f'data-confirm="{STOP_EN}"' in detail
    assert "deskpool/confirm.js" in detail
    chinese = client(owner, "zh-hans").get("/").content.decode()
    assert 'data-confirm="停止这个桌面？' in chinese


def test_a_stop_that_was_not_confirmed_asks_on_a_page_and_keeps_the_desktop(owner, running):
    browser = client(owner)
    asked = browser.post(f"/sessions/{running.pk}/stop/")
    assert asked.status_code == 200
    page = asked.content.decode()
    assert STOP_EN in page
    assert 'name="confirmed" value="1"' in page
    assert f'href="/sessions/{running.pk}/"' in page  # the way back
    running.refresh_from_db()
    assert running.state == "RUNNING"
    assert browser.post(f"/sessions/{running.pk}/stop/", {"confirmed": "1"}).status_code == 302
    running.refresh_from_db()
    assert running.state != "RUNNING"


def test_course_buttons_name_the_person_and_what_they_lose(owner, course):
    page = client(owner).get("/courses/cs-gpu101/").content.decode()
    assert (
        'data-confirm="Remove Li Wei from cs-gpu101? They lose coursework priority for this '
        'course."' in page
    )
    assert 'data-confirm="Remove tina as a TA of cs-gpu101?' in page
    assert 'data-confirm="Stop every desktop of cs-gpu101&#x27;s class?' in page


def test_course_removals_and_stop_all_change_nothing_until_confirmed(owner, course):
    browser = client(owner)
    li = course.students.get()
    helper = type(owner).objects.get(username="tina")
    for path, question in (
        (f"/courses/cs-gpu101/roster/{li.pk}/remove/", "Remove Li Wei from cs-gpu101?"),
        (f"/courses/cs-gpu101/tas/{helper.pk}/remove/", "Remove tina as a TA of cs-gpu101?"),
        ("/courses/cs-gpu101/stop-all/", "Stop every desktop of cs-gpu101"),
    ):
        asked = browser.post(path)
        assert asked.status_code == 200 and question in asked.content.decode(), path
    assert course.students.filter(pk=li.pk).exists()
    assert type(helper).objects.get(pk=helper.pk).has_perm("portal.manage_class_desktops", course)
    done = browser.post(f"/courses/cs-gpu101/roster/{li.pk}/remove/", {"confirmed": "1"})
    assert done.status_code == 302
    assert not course.students.filter(pk=li.pk).exists()


def test_cancelling_a_weekly_series_asks_first(owner, course, profile, pool):
    first = next_monday()
    last = first + timedelta(weeks=2)
    plan = check_series(owner, "cs-gpu101", profile.pk, 2, first, last, True, time(9), time(11))
    series = do_create_series(owner, plan)
    week = client(owner).get(f"/courses/cs-gpu101/calendar/?week={first.isoformat()}")
    question = "Cancel every coming booking of this weekly series?"
    assert f'data-confirm="{question}' in week.content.decode()
    asked = client(owner).post(f"/courses/cs-gpu101/series/{series.pk}/cancel/")
    assert asked.status_code == 200
    assert BookingSeries.objects.get(pk=series.pk).bookings.filter(cancelled_at=None).count() == 3


def test_deleting_a_quota_asks_first(admin_user):
    quota = Quota.objects.create(scope="user", key="ada", max_sessions=1)
    page = client(admin_user).get("/console/quotas/").content.decode()
    assert 'data-confirm="Delete the quota for ada?' in page
    asked = client(admin_user).post(f"/console/quotas/{quota.pk}/delete/")
    assert asked.status_code == 200 and "Delete the quota for ada?" in asked.content.decode()
    assert Quota.objects.filter(pk=quota.pk).exists()
