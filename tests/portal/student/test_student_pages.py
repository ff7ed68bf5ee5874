"""The student's pages: home (sessions and the request form), cancel, history, the desktop,
and the one rendering of a session that pages and live updates share."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.test import Client
from django.utils import timezone, translation

from people.models import Course, Member, ThesisGrant
from portal.live.consumers import UpdatesConsumer
from scheduling.models import Session, UsageRecord, set_default_profile
from scheduling.services.sessions import check_submit, do_submit

pytestmark = pytest.mark.django_db

ETA = datetime(2030, 3, 1, 23, 15, tzinfo=UTC)


@pytest.fixture(autouse=True)
def _default_language_and_zone_after():
    """The middleware leaves the last request's language and zone active in this thread;
    later tests (a sender rendering a payload) must not inherit a saved Chinese one."""
    yield
    translation.deactivate()
    timezone.deactivate()


def signed_in(user) -> Client:
    client = Client(HTTP_ACCEPT_LANGUAGE="en")
    client.force_login(user)
    return client


def queued(user, profile, **fields) -> Session:
    return Session.objects.create(
        user=user,
        profile=profile,
        purpose="hobby",
        queue_position=2,
        eta=ETA,
        reason_code="waiting",
        reason_params={"ahead": 1, "tier": "hobby", "eta": ETA.isoformat()},
        **fields,
    )


def test_home_shows_my_sessions_with_position_reason_and_start_in_my_zone(owner, profile):
    Member.objects.create(user=owner, time_zone="Asia/Shanghai")
    session = queued(owner, profile)
    page = signed_in(owner).get("/").content.decode()
    assert f'data-session-id="{session.pk}"' in page
    assert "Queue position: <strong>2</strong>" in page
    assert "1 ahead of you in hobby; estimated start 2030-03-02 07:15" in page  # the reason
    assert "Estimated start: <time" in page
    assert '2030-03-02 07:15</time> <span class="hint">(Asia/Shanghai)</span>' in page
    assert f'action="/sessions/{session.pk}/cancel/"' in page  # Cancel, not Stop, when queued


def test_the_form_offers_only_my_purposes_and_courses_and_shows_my_quota(owner, profile, make_user):
    Course.objects.create(code="cs999", title="Not mine")
    mine = Course.objects.create(code="cs101", title="Deep learning")
    set_default_profile(mine, profile)
    page = signed_in(owner).get("/").content.decode()
    assert 'value="hobby"' in page
    assert 'value="thesis"' not in page and 'value="coursework"' not in page
    assert "cs999" not in page and "cs101" not in page
    assert "Open requests and desktops: 0 of 3" in page
    assert "starts now" not in page  # no node: nothing free
    assert "Time limit: 240 minutes" in page and "MIG instance, Time-sliced share" in page

    mine.students.add(owner)
    ThesisGrant.objects.create(student=owner, until=timezone.localdate() + timedelta(days=9))
    queued(owner, profile)
    page = signed_in(owner).get("/").content.decode()
    assert 'value="thesis"' in page and 'value="coursework"' in page
    assert f'value="cs101" data-default-profile="{profile.pk}"' in page
    assert "cs999" not in page
    assert "Open requests and desktops: 1 of 3" in page


def test_a_refused_request_says_why_next_to_the_field_and_creates_nothing(owner, profile):
    answer = signed_in(owner).post(
        "/sessions/new/", {"profile": profile.pk, "purpose": "coursework"}
    )
    assert answer.status_code == 400
    page = answer.content.decode()
    assert (
        '<p class="error" id="course-error">Coursework requests name the course they are for.'
        in page
    )
    assert 'aria-invalid="true" aria-describedby="course-error"' in page
    assert not Session.objects.exists()

    answer = signed_in(owner).post("/sessions/new/", {"purpose": "hobby"})
    assert answer.status_code == 400
    assert (
        '<p class="error" id="profile-error">Pick a desktop profile.</p>' in answer.content.decode()
    )
    assert not Session.objects.exists()


def test_a_request_that_passes_is_created_and_shown_on_its_page(owner, profile):
    answer = signed_in(owner).post("/sessions/new/", {"profile": profile.pk, "purpose": "hobby"})
    session = Session.objects.get()
    assert answer.status_code == 302 and answer["Location"] == f"/sessions/{session.pk}/"
    page = signed_in(owner).get(answer["Location"]).content.decode()
    assert 'id="state" data-live="state" data-state="QUEUED"' in page
    assert 'id="cancel"' in page and 'id="stop"' not in page


def test_cancel_withdraws_a_queued_request_but_not_a_running_desktop(owner, profile):
    waiting = queued(owner, profile)
    answer = signed_in(owner).post(f"/sessions/{waiting.pk}/cancel/")
    assert answer.status_code == 302 and answer["Location"] == "/"
    waiting.refresh_from_db()
    assert waiting.state == "CANCELLED"

    running = Session.objects.create(
        user=owner, profile=profile, purpose="hobby", state="RUNNING", started_at=timezone.now()
    )
    signed_in(owner).post(f"/sessions/{running.pk}/cancel/")
    running.refresh_from_db()
    assert running.state == "RUNNING"


def test_history_shows_gpu_hours_of_past_sessions_and_the_week(owner, profile):
    # Yesterday 10:00 to 12:00 (campus zone): one day's bar, inside the last 7 days.
    yesterday = timezone.localdate() - timedelta(days=1)
    started = timezone.make_aware(datetime.combine(yesterday, datetime.min.time()))
    Session.objects.create(
        user=owner,
        profile=profile,
        purpose="hobby",
        state="ENDED",
        compute_units=0.5,
        started_at=started + timedelta(hours=10),
        ended_at=started + timedelta(hours=12),
    )
    page = signed_in(owner).get("/history/").content.decode()
    assert '<td class="gpu-hours">1.00</td>' in page
    assert "GPU-hours over the last 7 days: 1.00" in page
    assert '<svg viewBox="0 0 168 64" role="img"' in page
    assert "<td>1.00</td>" in page  # the chart's text alternative sums the day
    assert 'href="/quota-requests/"' in page


def test_history_counts_every_run_of_a_requeued_session_as_the_quota_does(owner, profile):
    """Preempted after an hour, run again for half an hour: 1.5 GPU-hours at 1 CU, read
    from its usage records (the session itself remembers only its last run)."""
    yesterday = timezone.localdate() - timedelta(days=1)
    nine = timezone.make_aware(datetime.combine(yesterday, datetime.min.time())) + timedelta(
        hours=9
    )
    session = Session.objects.create(
        user=owner,
        profile=profile,
        purpose="hobby",
        state="ENDED",
        compute_units=1.0,
        started_at=nine + timedelta(hours=2),
        ended_at=nine + timedelta(hours=2, minutes=30),
    )
    for run, (start, end) in enumerate(((0, 60), (120, 150)), start=1):
        UsageRecord.objects.create(
            session=session,
            run=run,
            user=owner,
            username=owner.username,
            purpose="hobby",
            profile_slug=profile.slug,
            compute_units=1.0,
            started_at=nine + timedelta(minutes=start),
            ended_at=nine + timedelta(minutes=end),
        )
    page = signed_in(owner).get("/history/").content.decode()
    assert '<td class="gpu-hours">1.50</td>' in page
    assert "GPU-hours over the last 7 days: 1.50" in page


def test_another_student_gets_404_on_my_session_pages(owner, stranger, profile):
    session = queued(owner, profile)
    client = signed_in(stranger)
    for path in ("/sessions/{}/", "/desktop/{}/"):
        assert client.get(path.format(session.pk)).status_code == 404
    for path in ("/sessions/{}/cancel/", "/sessions/{}/stop/"):
        assert client.post(path.format(session.pk)).status_code == 404
    session.refresh_from_db()
    assert session.state == "QUEUED"
    assert f"#{session.pk}" not in client.get("/").content.decode()


def test_the_desktop_page_gives_its_script_the_addresses_and_the_time_limit(owner, profile):
    started = timezone.now()
    session = Session.objects.create(
        user=owner, profile=profile, purpose="hobby", state="RUNNING", started_at=started
    )
    page = signed_in(owner).get(f"/desktop/{session.pk}/").content.decode()
    # The screen through the node's gateway: a ticket from the API, the wire's codes and paths.
    assert f'"ticket_api": "/api/v1/sessions/{session.pk}/ticket/"' in page
    assert '<script id="live-wire" type="application/json">{"close_codes": {' in page
    assert "/ws/desktop/" not in page
    assert f'"session_api": "/api/v1/sessions/{session.pk}/"' in page
    assert '"ends_at": "' in page and 'id="clipboard-text"' in page
    api = signed_in(owner).get(f"/api/v1/sessions/{session.pk}/").json()
    ends = datetime.fromisoformat(api["ends_at"])
    assert ends == started + timedelta(minutes=profile.max_duration_minutes)


@pytest.mark.django_db(transaction=True)
def test_the_live_update_carries_the_one_rendering_in_the_listeners_language(owner, profile):
    Member.objects.create(user=owner, language="zh-hans", time_zone="Asia/Shanghai")

    async def listen():
        communicator = WebsocketCommunicator(UpdatesConsumer.as_asgi(), "/ws/updates/")
        communicator.scope["user"] = owner
        connected, _code = await communicator.connect()
        assert connected
        session = await database_sync_to_async(
            lambda: do_submit(owner, check_submit(owner, profile.pk, "hobby", None))
        )()
        message = await asyncio.wait_for(communicator.receive_json_from(), timeout=5)
        await communicator.disconnect()
        return session, message

    async def catch_up(session_id: int) -> dict:
        path = f"/ws/updates/?sessions={session_id}"
        communicator = WebsocketCommunicator(UpdatesConsumer.as_asgi(), path)
        communicator.scope["user"] = owner
        assert (await communicator.connect())[0]
        message = await asyncio.wait_for(communicator.receive_json_from(), timeout=5)
        await communicator.disconnect()
        return message

    session, message = async_to_sync(listen)()
    assert message["type"] == "session.update"
    client = signed_in(owner)
    # A page's catch-up (a socket opened later, naming the card) carries the same rendering.
    caught_up = async_to_sync(catch_up)(session.pk)
    assert (message["html"], message["html_item"]) == (caught_up["html"], caught_up["html_item"])
    assert 'id="state" data-live="state" data-state="QUEUED"' in message["html"]
    assert "排队中" in message["html"] or "已排队" in message["html"]  # the state, in Chinese
    # The session's page includes the very same fragment (its forms carry the page's token).
    page = client.get(f"/sessions/{session.pk}/").content.decode()
    token = page.split('name="csrfmiddlewaretoken" value="')[1].split('"')[0]
    assert message["html"].strip().replace('value=""', f'value="{token}"') in page


def test_the_session_page_says_plainly_that_the_home_is_per_node(owner, profile, register_node):
    node, _ = register_node("gpu-home", [])
    running = Session.objects.create(
        user=owner,
        profile=profile,
        purpose="hobby",
        state="RUNNING",
        node=node,
        started_at=timezone.now(),
    )
    page = signed_in(owner).get(f"/sessions/{running.pk}/").content.decode()
    assert page.count('id="home-notice"') == 1  # one notice (services.home_place), no other
    assert "Your home folder is kept on node gpu-home only" in page
    waiting = queued(owner, profile)  # not on a node yet: nothing to say
    assert (
        'id="home-notice"' not in signed_in(owner).get(f"/sessions/{waiting.pk}/").content.decode()
    )


@pytest.mark.django_db(transaction=True)
def test_a_pages_live_updates_carry_only_the_form_it_shows(owner, profile):
    """The home page asks ``?fragment=item``, the session's page ``detail``, the desktop's
    ``none``; each update is rendered in that form only, and a form no page shows is refused."""

    async def first_update(path: str) -> tuple[bool, dict]:
        communicator = WebsocketCommunicator(UpdatesConsumer.as_asgi(), path)
        communicator.scope["user"] = owner
        connected, _code = await communicator.connect()
        if not connected:
            return False, {}
        await database_sync_to_async(
            lambda: do_submit(owner, check_submit(owner, profile.pk, "hobby", None))
        )()
        message = await asyncio.wait_for(communicator.receive_json_from(), timeout=5)
        await communicator.disconnect()
        return True, message

    forms = {}
    for form in ("item", "detail", "none", "bogus", "item&fragment=detail"):
        connected, message = async_to_sync(first_update)(f"/ws/updates/?fragment={form}")
        forms[form] = connected and sorted(k for k in message if k.startswith("html"))
    assert forms == {
        "item": ["html_item"],
        "detail": ["html"],
        "none": [],
        "bogus": False,
        "item&fragment=detail": False,
    }
    home = signed_in(owner).get("/").content.decode()
    assert '"fragment": "item"' in home and '"updates_path": "/ws/updates/"' in home
