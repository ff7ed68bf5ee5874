"""Browser events leave only after the transaction commits."""

from __future__ import annotations

import asyncio

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from people.models import Course
from scheduling import events
from scheduling.services.sessions import check_submit, do_submit

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def sent(monkeypatch):
    """Every event handed to the channel layer, with whether a transaction was still open."""
    record = []
    real_send = events._send

    def recording_send(group, payload):
        record.append((group, payload, connection.in_atomic_block))
        real_send(group, payload)

    monkeypatch.setattr(events, "_send", recording_send)
    return record


def test_session_update_is_sent_after_commit_and_not_before(owner, profile, sent):
    with transaction.atomic():
        session = do_submit(owner, check_submit(owner, profile.pk, "hobby", None))
        assert sent == []
    assert [
        (group, payload.get("session") or payload.get("sessions"), open_tx)
        for group, payload, open_tx in sent
        if payload["type"] != "admin.audit"
    ] == [
        (events.user_group(owner.pk), session_payload_of(session), False),
        # admin.session: only the ids and states
        (events.ADMIN_GROUP, [{"id": session.pk, "state": "QUEUED"}], False),
    ]
    assert ("admin.audit", False) in [(payload["type"], tx) for _, payload, tx in sent]


def test_one_commit_tells_the_class_and_the_admins_once(make_user, profile, sent):
    """Sessions changed together (as a cycle places them): one update each to its owner,
    one ``class.sessions`` to their course's live class, one ``admin.session``."""
    course = Course.objects.create(code="cs9", title="GPU 9")
    people = [make_user(f"s{n}") for n in range(3)]
    course.students.add(*people)
    with transaction.atomic():
        made = [
            do_submit(p, check_submit(p, profile.pk, "coursework", course.code)) for p in people
        ]
    ids = sorted(s.pk for s in made)
    by_group = [(group, payload["type"]) for group, payload, _ in sent]
    assert sorted(g for g, kind in by_group if kind == "session.update") == sorted(
        events.user_group(p.pk) for p in people
    )
    [to_class] = [p for g, p, _ in sent if g == events.course_group(course.pk)]
    assert to_class == {"type": "class.sessions", "sessions": ids}
    [to_admins] = [p for _, p, _ in sent if p["type"] == "admin.session"]
    assert to_admins["sessions"] == [{"id": pk, "state": "QUEUED"} for pk in ids]


def test_a_rolled_back_submission_sends_nothing(owner, profile, sent):
    with pytest.raises(RuntimeError), transaction.atomic():
        do_submit(owner, check_submit(owner, profile.pk, "hobby", None))
        raise RuntimeError("boom")
    assert sent == []


def test_a_rolled_back_submission_is_not_sent_with_the_next_commit(owner, stranger, profile, sent):
    """A created session is sent as stored, without reading it back: only once committed."""
    with pytest.raises(RuntimeError), transaction.atomic():
        do_submit(owner, check_submit(owner, profile.pk, "hobby", None))
        raise RuntimeError("boom")
    kept = do_submit(stranger, check_submit(stranger, profile.pk, "hobby", None))
    updates = [p["session"] for _, p, _ in sent if p["type"] == "session.update"]
    assert [(u["id"], u["state"]) for u in updates] == [(kept.pk, "QUEUED")]
    assert updates[0] == session_payload_of(kept)  # as a read back would have sent it


def test_a_submission_reads_nothing_back_for_its_broadcast(owner, profile, sent):
    """The created session has no allocations yet (nothing could place it before its commit):
    the broadcast and the caller's answer know so without asking the database."""
    submit = check_submit(owner, profile.pk, "hobby", None)
    with CaptureQueriesContext(connection) as queries:
        session = do_submit(owner, submit)
    statements = [q["sql"] for q in queries.captured_queries]
    assert statements[-1] == "COMMIT"  # nothing read after it, for the broadcast
    assert not [sql for sql in statements if "scheduling_allocation" in sql]
    [update] = [p["session"] for _, p, _ in sent if p["type"] == "session.update"]
    assert (update["id"], update["slice"], update["node"]) == (session.pk, None, None)
    assert list(session.allocations.all()) == []


def test_the_owners_group_receives_the_update_through_redis(owner, profile):
    async def listen_and_submit():
        layer = get_channel_layer()
        channel = await layer.new_channel()
        await layer.group_add(events.user_group(owner.pk), channel)
        session = await database_sync_to_async(
            lambda: do_submit(owner, check_submit(owner, profile.pk, "hobby", None))
        )()
        message = await asyncio.wait_for(layer.receive(channel), timeout=5)
        return session, message

    session, message = async_to_sync(listen_and_submit)()
    assert message["type"] == "session.update"
    assert (message["session"]["id"], message["session"]["state"]) == (session.pk, "QUEUED")


def test_the_live_update_carries_what_the_api_returns(owner, profile, sent):
    """One payload for pages and the API: the reason rendered, its code and parameters."""
    from rest_framework.test import APIClient

    session = do_submit(owner, check_submit(owner, profile.pk, "hobby", None))
    [payload] = [p for group, p, _ in sent if group == events.user_group(owner.pk)]
    client = APIClient()
    client.force_authenticate(owner)
    api = client.get(f"/api/v1/sessions/{session.pk}/").json()
    assert payload["session"] == api
    assert (api["reason_code"], api["reason"]) == ("submitted", "waiting for the scheduler")


def session_payload_of(session):
    session.refresh_from_db()
    return events.session_payload(session)


def test_an_admins_console_hears_of_someone_elses_session_without_their_details(
    owner, profile, admin_user
):
    """Admins' console pages refresh on ``admin.session`` (ids and states only); the owner's
    full update stays in the owner's group."""
    from channels.testing import WebsocketCommunicator

    from portal.live.consumers import UpdatesConsumer

    async def listen() -> dict:
        communicator = WebsocketCommunicator(UpdatesConsumer.as_asgi(), "/ws/updates/")
        communicator.scope["user"] = admin_user
        connected, _code = await communicator.connect()
        assert connected
        session = await database_sync_to_async(
            lambda: do_submit(owner, check_submit(owner, profile.pk, "hobby", None))
        )()
        message = {"type": ""}
        while message["type"] != "admin.session":  # admin.audit (the submission's) too
            message = await asyncio.wait_for(communicator.receive_json_from(), timeout=5)
        await communicator.disconnect()
        return {"message": message, "id": session.pk}

    got = async_to_sync(listen)()
    assert got["message"] == {
        "type": "admin.session",
        "sessions": [{"id": got["id"], "state": "QUEUED"}],
    }


def test_an_audit_event_tells_the_admins_console_after_commit(sent):
    from scheduling.choices import AuditKind
    from scheduling.services.audit import record

    with transaction.atomic():
        record(AuditKind.POLICY_CHANGED, "user:root", data={"changed": ["warn_percent"]})
        assert sent == []
    assert [(group, payload) for group, payload, _ in sent] == [
        (events.ADMIN_GROUP, {"type": "admin.audit", "kind": "policy.changed"})
    ]


def test_a_class_of_updates_to_one_process_is_not_dropped(settings):
    """A class start sends an update to each of its students at once, while the process
    serving their pages is busy: all of them must arrive. (The list layer dropped what came
    past its capacity, 100 by default, without an error, and students waited for the
    silence fallback; the pub/sub layer keeps no such list.)"""
    if settings.EMBEDDED:
        pytest.skip("the embedded layer is not channels-redis")
    students = 250

    async def burst() -> int:
        layer = get_channel_layer()
        channels = [await layer.new_channel() for _ in range(students)]
        for n, channel in enumerate(channels):
            await layer.group_add(f"burst-{n}", channel)
        for n in range(students):  # nobody reads while they are sent
            await layer.group_send(f"burst-{n}", {"type": "session.update", "n": n})
        received = [await asyncio.wait_for(layer.receive(c), 5) for c in channels]
        return sum(1 for n, message in enumerate(received) if message["n"] == n)

    assert async_to_sync(burst)() == students
