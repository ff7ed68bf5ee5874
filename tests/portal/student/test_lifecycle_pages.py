"""The session page's Extend and Resume buttons (issue 15): page forms through the
services, the new limit or the refusal's reason shown, another person's session 404."""

from __future__ import annotations

import pytest
from django.test import Client
from django.utils import timezone

from scheduling.models import DesktopProfile, Session
from scheduling.services.idle import wants_email
from tests.scheduling.test_lifecycle import run_desktop, started_ago, suspend

pytestmark = [pytest.mark.django_db, pytest.mark.lifecycle]


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_the_session_page_offers_extend_and_shows_the_new_limit_then_the_reason(
    owner, profile, pool
):
    DesktopProfile.objects.filter(pk=profile.pk).update(max_total_minutes=300)
    session = run_desktop(owner, profile)
    client = signed_in(owner)
    page = client.get(f"/sessions/{session.pk}/").content.decode()
    assert 'id="extend"' in page and 'id="resume"' not in page
    answer = client.post(f"/sessions/{session.pk}/extend/", follow=True).content.decode()
    assert "Extended: this desktop now ends at" in answer
    assert Session.objects.get(pk=session.pk).extended_minutes == 60
    refused = client.post(f"/sessions/{session.pk}/extend/", follow=True).content.decode()
    assert "past its profile&#x27;s maximum of 300 minutes" in refused
    assert Session.objects.get(pk=session.pk).extended_minutes == 60


def test_a_suspended_session_shows_resume_and_goes_back_to_the_queue(owner, profile, pool):
    session = suspend(run_desktop(owner, profile))
    client = signed_in(owner)
    page = client.get(f"/sessions/{session.pk}/").content.decode()
    assert 'id="resume"' in page and 'id="extend"' not in page
    assert 'data-idle="suspended"' in page
    home = client.get("/").content.decode()
    assert f"/sessions/{session.pk}/resume/" in home and f"Resume session #{session.pk}" in home
    answer = client.post(f"/sessions/{session.pk}/resume/", follow=True).content.decode()
    assert "Resumed: your desktop is back in the queue." in answer
    assert Session.objects.get(pk=session.pk).state == "QUEUED"
    again = client.post(f"/sessions/{session.pk}/resume/", follow=True).content.decode()
    assert "Only a suspended session can be resumed" in again


def test_another_persons_session_is_404_and_a_get_is_refused(owner, stranger, profile, pool):
    session = run_desktop(owner, profile)
    other = signed_in(stranger)
    for verb in ("extend", "resume"):
        assert other.post(f"/sessions/{session.pk}/{verb}/").status_code == 404
    assert signed_in(owner).get(f"/sessions/{session.pk}/extend/").status_code == 405
    assert Session.objects.get(pk=session.pk).extended_minutes == 0


def test_the_account_page_sets_the_email_opt_in(owner):
    client = signed_in(owner)
    assert 'id="email-warnings"' in client.get("/account/").content.decode()
    assert not wants_email(owner.pk)
    client.post("/account/notices/", {"email_warnings": "on"})
    assert wants_email(owner.pk)
    page = client.get("/account/").content.decode()
    assert "checked" in page.split('id="email-warnings"')[1][:40]
    client.post("/account/notices/", {})
    assert not wants_email(owner.pk)
    assert client.get("/account/notices/").status_code == 405


def test_the_time_limit_warning_shows_in_the_last_15_minutes(owner, profile, pool):
    session = run_desktop(owner, profile)
    client = signed_in(owner)
    assert 'id="limit-warning"' not in client.get(f"/sessions/{session.pk}/").content.decode()
    started_ago(session, 240 - 14)
    page = client.get(f"/sessions/{session.pk}/").content.decode()
    assert 'id="limit-warning"' in page and "reaches its time limit at" in page


def test_the_console_lists_idle_sessions_for_admins_only(owner, admin_user, profile, pool):
    session = run_desktop(owner, profile)
    Session.objects.filter(pk=session.pk).update(idle_state="warned", idle_since=timezone.now())
    assert signed_in(owner).get("/console/idle/").status_code in (403, 404)
    page = signed_in(admin_user).get("/console/idle/").content.decode()
    assert f'data-session-id="{session.pk}" data-idle="warned"' in page
    assert owner.get_username() in page and str(session.node) in page
