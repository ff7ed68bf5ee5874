"""Two languages (en, zh-Hans) and each person's time zone (docs/i18n.md)."""

from __future__ import annotations

import asyncio
import gettext
import shutil
import subprocess
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.core.management import call_command
from django.test import Client, override_settings
from rest_framework.test import APIClient

from people.models import Member
from portal.live.consumers import UpdatesConsumer
from scheduling.events import user_group
from scheduling.models import Session

pytestmark = pytest.mark.django_db

ZH = "zh-hans"
CATALOGUE = settings.BASE_DIR / "locale" / "zh_Hans" / "LC_MESSAGES" / "django.po"
# What makemessages leaves out, as docs/i18n.md says to run it.
IGNORED = [".venv", "var", "test-output", "static/vendor"]
GETTEXT_TOOLS = ("xgettext", "msgmerge", "msgattrib", "msgfmt")


def signed_in(user, **headers) -> Client:
    client = Client(**headers)
    client.force_login(user)
    return client


def test_home_page_follows_the_browser_language(owner):
    chinese = signed_in(owner).get("/", HTTP_ACCEPT_LANGUAGE="zh-Hans")
    assert chinese.status_code == 200
    text = chinese.content.decode()
    assert '<html lang="zh-hans">' in text
    assert "申请 GPU 桌面" in text and "Ask for a GPU desktop" not in text

    english = signed_in(owner).get("/", HTTP_ACCEPT_LANGUAGE="en")
    text = english.content.decode()
    assert '<html lang="en">' in text
    assert "Ask for a GPU desktop" in text and "申请 GPU 桌面" not in text


def test_every_page_has_a_labelled_language_switcher(owner):
    for client, path in ((Client(), "/login/"), (signed_in(owner), "/")):
        text = client.get(path, HTTP_ACCEPT_LANGUAGE="en").content.decode()
        assert 'action="/i18n/setlang/"' in text
        assert '<label for="language-select">Language</label>' in text
        assert f'name="next" value="{path}"' in text
        assert 'value="zh-hans" lang="zh-hans">简体中文</option>' in text


def test_the_switcher_changes_the_language_of_an_anonymous_visitor():
    client = Client()
    answer = client.post("/i18n/setlang/", {"language": ZH, "next": "/login/"})
    assert answer.status_code == 302 and answer["Location"] == "/login/"
    page = client.get("/login/", HTTP_ACCEPT_LANGUAGE="en").content.decode()
    assert "使用校园账户登录" in page


def test_a_signed_in_choice_is_saved_on_the_member_and_wins_over_the_browser(owner):
    assert not Member.objects.filter(user=owner).exists()
    answer = signed_in(owner).post("/i18n/setlang/", {"language": ZH, "next": "/"})
    assert answer.status_code == 302
    assert Member.objects.get(user=owner).language == ZH

    # Another browser, no language cookie, asking for English: the saved choice wins.
    page = signed_in(owner).get("/", HTTP_ACCEPT_LANGUAGE="en").content.decode()
    assert "申请 GPU 桌面" in page

    signed_in(owner).post("/i18n/setlang/", {"language": "en", "next": "/"})
    assert Member.objects.get(user=owner).language == "en"
    page = signed_in(owner).get("/", HTTP_ACCEPT_LANGUAGE="zh-Hans").content.decode()
    assert "Ask for a GPU desktop" in page


def test_a_saved_time_zone_shows_session_times_in_that_zone(owner, profile):
    session = Session.objects.create(
        user=owner,
        profile=profile,
        purpose="hobby",
        created_at=datetime(2026, 1, 5, 2, 30, tzinfo=UTC),
        reason_code="waiting",
        reason_params={"ahead": 2, "tier": "hobby", "eta": "2030-03-01T23:15:00+00:00"},
    )
    path = f"/sessions/{session.pk}/"
    campus = signed_in(owner).get(path, HTTP_ACCEPT_LANGUAGE="en").content.decode()
    assert "2026-01-05 02:30" in campus and "(UTC)" in campus
    assert "estimated start 2030-03-01 23:15" in campus

    Member.objects.create(user=owner, time_zone="Asia/Shanghai")
    page = signed_in(owner).get(path, HTTP_ACCEPT_LANGUAGE="en").content.decode()
    assert "2026-01-05 10:30" in page and "(Asia/Shanghai)" in page
    assert "estimated start 2030-03-02 07:15" in page


def test_a_bad_saved_time_zone_falls_back_to_the_campus_zone(owner, profile):
    Member.objects.create(user=owner, time_zone="Nowhere/Atlantis")
    session = Session.objects.create(
        user=owner,
        profile=profile,
        purpose="hobby",
        created_at=datetime(2026, 1, 5, 2, 30, tzinfo=UTC),
    )
    page = signed_in(owner).get(f"/sessions/{session.pk}/")
    assert page.status_code == 200
    assert "2026-01-05 02:30" in page.content.decode()


def test_the_account_page_saves_a_time_zone_and_refuses_an_unknown_one(owner):
    client = signed_in(owner)
    refused = client.post(
        "/account/", {"language": "", "time_zone": "Mars/Olympus"}, HTTP_ACCEPT_LANGUAGE="en"
    )
    assert refused.status_code == 400
    assert (
        "Mars/Olympus is not a time zone we know. Pick one from the list, such as Asia/Shanghai."
        in refused.content.decode()
    )
    assert not Member.objects.filter(user=owner).exclude(time_zone="").exists()  # nothing saved

    chinese = client.post(
        "/account/", {"language": "", "time_zone": "Mars/Olympus"}, HTTP_ACCEPT_LANGUAGE="zh-Hans"
    )
    assert "Mars/Olympus 不是已知的时区" in chinese.content.decode()

    saved = client.post("/account/", {"language": ZH, "time_zone": "Asia/Shanghai"})
    assert saved.status_code == 302
    member = Member.objects.get(user=owner)
    assert (member.language, member.time_zone) == (ZH, "Asia/Shanghai")


def test_the_api_renders_a_reason_in_the_requested_language(owner, profile):
    session = Session.objects.create(
        user=owner, profile=profile, purpose="hobby", reason_code="submitted"
    )
    client = APIClient()
    client.force_login(owner)
    url = f"/api/v1/sessions/{session.pk}/"
    chinese = client.get(url, HTTP_ACCEPT_LANGUAGE="zh-Hans").json()
    assert chinese["reason"] == "正在等待调度"
    assert chinese["reason_code"] == "submitted"
    assert client.get(url, HTTP_ACCEPT_LANGUAGE="en").json()["reason"] == (
        "waiting for the scheduler"
    )


def test_a_token_client_gets_its_saved_language_and_zone(owner, profile):
    """Token clients are authenticated inside DRF, after the middleware: their saved
    language and zone still apply (portal.api.auth), over the request's Accept-Language."""
    Member.objects.create(user=owner, language=ZH, time_zone="Asia/Shanghai")
    client = APIClient()
    token = client.post(
        "/api/v1/auth/token/", {"username": owner.username, "password": "pw-ada"}
    ).json()["token"]
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    answer = client.post(
        "/api/v1/sessions/",
        {"profile": profile.pk, "purpose": "coursework"},
        format="json",
        HTTP_ACCEPT_LANGUAGE="en",
    )
    assert answer.status_code == 400
    assert "课程作业请求需要注明所属课程。" in str(answer.json())
    eta = (datetime.now(UTC) + timedelta(hours=2)).replace(minute=30, second=0, microsecond=0)
    session = Session.objects.create(
        user=owner,
        profile=profile,
        purpose="hobby",
        reason_code="waiting",
        reason_params={"tier": 3, "ahead": 0, "higher": 0, "eta": eta.isoformat()},
    )
    reason = client.get(f"/api/v1/sessions/{session.pk}/", HTTP_ACCEPT_LANGUAGE="en").json()
    assert eta.astimezone(ZoneInfo("Asia/Shanghai")).strftime("%H:%M") in reason["reason"]


def test_a_service_refusal_is_translated(owner, profile):
    answer = signed_in(owner).post(
        "/sessions/new/",
        {"profile": profile.pk, "purpose": "coursework"},
        HTTP_ACCEPT_LANGUAGE="zh-Hans",
    )
    assert answer.status_code == 400
    assert "课程作业请求需要注明所属课程。" in answer.content.decode()


def _live_reason(user, params: dict, accept_language: str) -> str:
    """The reason a listener on /ws/updates/ gets for a session.update."""

    async def listen() -> str:
        communicator = WebsocketCommunicator(
            UpdatesConsumer.as_asgi(),
            "/ws/updates/",
            headers=[(b"accept-language", accept_language.encode())],
        )
        communicator.scope["user"] = user
        connected, _code = await communicator.connect()
        assert connected
        session = {"id": 1, "reason": "", "reason_code": "waiting", "reason_params": params}
        await get_channel_layer().group_send(
            user_group(user.pk), {"type": "session.update", "session": session}
        )
        message = await asyncio.wait_for(communicator.receive_json_from(), timeout=5)
        await communicator.disconnect()
        return message["session"]["reason"]

    return async_to_sync(listen)()


@pytest.mark.django_db(transaction=True)
def test_live_updates_follow_the_listeners_saved_language_and_zone(owner):
    params = {"ahead": 1, "tier": "hobby", "eta": "2030-03-01T23:15:00+00:00"}
    english = _live_reason(owner, params, "en")
    assert "estimated start 2030-03-01 23:15" in english
    assert "预计" in _live_reason(owner, params, "zh-Hans")

    Member.objects.create(user=owner, language=ZH, time_zone="Asia/Shanghai")
    saved = _live_reason(owner, params, "en")
    assert (
        saved == "正在等待空闲切片：兴趣项目队列中你前面还有 1 个请求；预计 2030年3月2日 07:15 开始"
    )


def _entries(po_text: str) -> list[str]:
    """The msgids of a .po text (msgattrib's output), the header left out."""
    out = []
    for block in po_text.split("\n\n"):
        lines = [line for line in block.splitlines() if not line.startswith("#")]
        text, reading = "", False
        for line in lines:
            if line.startswith("msgid "):
                text, reading = line[len("msgid ") :].strip('"'), True
            elif line.startswith("msg"):
                reading = False
            elif reading and line.startswith('"'):
                text += line.strip('"')
        if text:
            out.append(text)
    return out


@pytest.mark.skipif(
    not all(shutil.which(tool) for tool in GETTEXT_TOOLS),
    reason="GNU gettext (xgettext, msgmerge, msgattrib, msgfmt) is not installed; "
    "`.ci/run` installs the Debian package gettext",
)
def test_the_zh_hans_catalogue_leaves_nothing_untranslated_or_fuzzy(tmp_path, monkeypatch):
    """makemessages over today's code, into a copy of locale/: every entry translated.

    makemessages writes to any locale/ folder it finds under the folder it runs in, so it
    runs in a scratch folder of links to the project's top-level entries and a copy of
    locale/: the committed catalogue is never touched.
    """
    work = tmp_path / "project"
    work.mkdir()
    for entry in settings.BASE_DIR.iterdir():
        if entry.name not in {"locale", ".git", *IGNORED}:
            (work / entry.name).symlink_to(entry)
    locale = work / "locale"
    shutil.copytree(settings.BASE_DIR / "locale", locale)
    monkeypatch.chdir(work)
    with override_settings(LOCALE_PATHS=[locale]):
        call_command(
            "makemessages",
            locale=["zh_Hans"],
            no_obsolete=True,
            symlinks=True,
            ignore_patterns=IGNORED,
            verbosity=0,
        )
    fresh = locale / "zh_Hans" / "LC_MESSAGES" / "django.po"
    problems = {}
    for flag in ("--untranslated", "--only-fuzzy"):
        found = subprocess.run(
            ["msgattrib", flag, str(fresh)], capture_output=True, text=True, check=True
        ).stdout
        if _entries(found):
            problems[flag] = _entries(found)
    assert not problems, (
        f"the zh_Hans catalogue needs work (run makemessages, translate, compilemessages; "
        f"docs/i18n.md): {problems}"
    )
    assert len(_entries(fresh.read_text())) > 100


@pytest.mark.skipif(not shutil.which("msgfmt"), reason="GNU gettext's msgfmt is not installed")
def test_the_committed_mo_is_compiled_from_the_committed_po(tmp_path):
    compiled = tmp_path / "django.mo"
    subprocess.run(["msgfmt", "--check", "-o", str(compiled), str(CATALOGUE)], check=True)
    with compiled.open("rb") as fresh, CATALOGUE.with_suffix(".mo").open("rb") as committed:
        want = gettext.GNUTranslations(fresh)._catalog  # type: ignore[attr-defined]
        have = gettext.GNUTranslations(committed)._catalog  # type: ignore[attr-defined]
    assert have == want, "locale/zh_Hans/LC_MESSAGES/django.mo is stale: run compilemessages"
