"""The account page's e-mail choices (issue 38, told when away) and the pages' browser
notification part (#away, #away-config): what it starts from, asked for by a button only."""

from __future__ import annotations

import json
import re

import pytest
from django.test import Client
from django.utils import timezone

from people.models import Member
from scheduling.models import Session
from scheduling.services.lifecycle_notices import EmailChoices, email_choices_of
from tests.portal.student.test_limit_pages import desktop_page
from tests.scheduling.test_away_emails import run_desktop

pytestmark = pytest.mark.django_db


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def checked(page: str, box: str) -> bool:
    tag = re.search(rf'<input[^>]*id="{box}"[^>]*>', page)
    assert tag, box
    return " checked" in tag.group(0)


def test_each_email_is_chosen_on_its_own_and_none_is_on_before(owner):
    client = signed_in(owner)
    page = client.get("/account/").content.decode()
    assert not any(checked(page, b) for b in ("email-ready", "email-preempting", "email-warnings"))

    answer = client.post("/account/notices/", {"email_ready": "on", "email_preempting": "on"})
    assert answer.status_code == 302
    assert email_choices_of(owner) == EmailChoices(ready=True, preempting=True, warnings=False)
    page = client.get("/account/").content.decode()
    assert checked(page, "email-ready") and checked(page, "email-preempting")
    assert not checked(page, "email-warnings")
    assert "Your e-mail choices are saved." in page

    # Anything but "on" is off; none chosen says where they are told instead.
    client.post("/account/notices/", {"email_ready": "yes please", "email_warnings": ""})
    assert email_choices_of(owner) == EmailChoices()
    page = client.get("/account/").content.decode()
    assert "the pages and browser notifications still tell you" in page


def test_the_choices_are_only_the_signed_in_persons(owner, stranger):
    anonymous = Client().post("/account/notices/", {"email_ready": "on"})
    assert anonymous.status_code == 302 and "/login/" in anonymous["Location"]
    signed_in(stranger).post("/account/notices/", {"email_ready": "on"})
    assert email_choices_of(owner) == EmailChoices()
    assert email_choices_of(stranger).ready
    assert signed_in(owner).get("/account/notices/").status_code == 405


def away_config(page: str) -> dict:
    found = re.search(r'<script id="away-config" type="application/json">(.*?)</script>', page)
    assert found, "no #away-config"
    return json.loads(found.group(1))


def test_the_pages_carry_the_button_and_start_from_the_persons_open_sessions(
    owner, stranger, profile
):
    started = timezone.now()
    mine = Session.objects.create(
        user=owner, profile=profile, purpose="hobby", state="RUNNING", started_at=started
    )
    queued = Session.objects.create(user=owner, profile=profile, purpose="hobby")
    Session.objects.create(user=owner, profile=profile, purpose="hobby", state="ENDED")
    Session.objects.create(user=stranger, profile=profile, purpose="hobby")
    client = signed_in(owner)
    for url in ("/", f"/sessions/{mine.pk}/"):
        page = client.get(url).content.decode()
        assert 'id="away-ask"' in page and "Tell me when my desktop is ready" in page
        assert "deskpool/away.js" in page
        config = away_config(page)
        assert config["sessions"] == {
            str(mine.pk): {"state": "RUNNING", "ends_at": mine.ends_at.isoformat()},
            str(queued.pk): {"state": "QUEUED", "ends_at": None},
        }
        assert config["warn_minutes"] == [15, 5]
        assert config["words"]["ready_title"] == "Your desktop is ready"
        assert "%(minutes)s" in config["words"]["preempting_body"]


def test_the_notification_words_are_in_the_persons_language(owner):
    """Passes once the zh-Hans catalogue has the new messages."""
    Member.objects.create(user=owner, language="zh-hans")
    words = away_config(signed_in(owner).get("/").content.decode())["words"]
    for name in ("ready_title", "ready_body", "preempting_body", "limit_body", "on"):
        assert any("\u4e00" <= ch <= "\u9fff" for ch in words[name]), (name, words[name])


def test_the_desktop_pages_drawer_carries_the_button(owner, profile, pool):
    """On a desktop's page the button sits in the drawer's Time part."""
    session = run_desktop(owner, profile)
    html = desktop_page(signed_in(owner), session)
    drawer = re.search(r'<aside id="drawer".*?</aside>', html, re.S)
    assert drawer and 'id="away-ask"' in drawer.group(0)
    assert str(session.pk) in away_config(html)["sessions"]
