"""A page's catch-up through its updates socket (``?sessions=``, portal/live/catch_up.py): the
cards it names, as they are now, before any change; only what the person may see; anything but
a list of ids refused."""

from __future__ import annotations

import asyncio

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from guardian.shortcuts import assign_perm

from nodeagent.gateway.codes import CATCH_UP_MAX, CLOSE_BAD_REQUEST
from portal.live.catch_up import asked_sessions
from portal.live.consumers import UpdatesConsumer
from scheduling.models import Session
from scheduling.services.sessions import check_submit, do_submit

pytestmark = pytest.mark.django_db(transaction=True)


def session_of(user, profile, state: str) -> Session:
    return Session.objects.create(user=user, profile=profile, purpose="hobby", state=state)


async def messages(user, path: str, then=None, count: int = 1) -> tuple[object, list[dict]]:
    """Connect as ``user`` to ``path``; run ``then`` (in a thread) once connected; the first
    ``count`` messages. (False, code) where the socket was refused."""
    communicator = WebsocketCommunicator(UpdatesConsumer.as_asgi(), path)
    communicator.scope["user"] = user
    connected, code = await communicator.connect()
    if not connected:
        return code, []
    if then is not None:
        await database_sync_to_async(then)()
    received = [
        await asyncio.wait_for(communicator.receive_json_from(), timeout=5) for _ in range(count)
    ]
    assert await communicator.receive_nothing(timeout=0.2)
    await communicator.disconnect()
    return True, received


def test_the_socket_first_sends_the_named_cards_as_they_are_then_each_change(
    owner, stranger, profile
) -> None:
    placed, running = session_of(owner, profile, "PLACED"), session_of(owner, profile, "RUNNING")
    others = session_of(stranger, profile, "QUEUED")
    asked = f"{running.pk},{others.pk},{placed.pk}"

    def submit() -> None:
        do_submit(owner, check_submit(owner, profile.pk, "hobby", None))

    opened, received = async_to_sync(messages)(
        owner, f"/ws/updates/?fragment=item&sessions={asked}", submit, count=3
    )
    assert opened is True
    # The stranger's session is left out, as if it did not exist; the order is the page's.
    assert [(m["session"]["id"], m["session"]["state"]) for m in received[:2]] == [
        (running.pk, "RUNNING"),
        (placed.pk, "PLACED"),
    ]
    assert all(m["type"] == "session.update" and "html" not in m for m in received)
    assert f'data-session-id="{running.pk}"' in received[0]["html_item"]
    assert received[0]["session"]["reason"] is not None  # rendered for the listener
    new = received[2]["session"]  # the change after the socket opened comes after
    assert new["id"] not in (running.pk, placed.pk, others.pk) and new["state"] == "QUEUED"


def test_a_granted_session_is_caught_up_and_nothing_without_the_parameter(
    owner, stranger, profile
) -> None:
    theirs = session_of(stranger, profile, "RUNNING")
    assign_perm("scheduling.view_session", owner, theirs)
    opened, received = async_to_sync(messages)(
        owner, f"/ws/updates/?fragment=detail&sessions={theirs.pk}"
    )
    assert opened is True and received[0]["session"]["id"] == theirs.pk
    assert 'id="state"' in received[0]["html"]
    # No ?sessions=: nothing is sent until something changes.
    mine = session_of(owner, profile, "RUNNING")

    def submit() -> None:
        do_submit(owner, check_submit(owner, profile.pk, "hobby", None))

    opened, received = async_to_sync(messages)(owner, "/ws/updates/?fragment=detail", submit)
    assert opened is True and received[0]["session"]["id"] != mine.pk


@pytest.mark.parametrize(
    "value",
    ["", "0", "-1", "abc", "1,,2", "1;2", "1%202", "1&sessions=2", "9" * 19,
     ",".join(str(n) for n in range(1, CATCH_UP_MAX + 2))],
)  # fmt: skip
def test_anything_but_a_list_of_ids_is_refused(owner, value: str) -> None:
    code, received = async_to_sync(messages)(owner, f"/ws/updates/?sessions={value}")
    assert (code, received) == (CLOSE_BAD_REQUEST, [])


def test_the_ids_are_read_in_order_once_each() -> None:
    assert asked_sessions(b"fragment=item") == ()
    assert asked_sessions(b"sessions=12,3,12,40") == (12, 3, 40)
    most = ",".join(str(n) for n in range(1, CATCH_UP_MAX + 1)).encode()
    assert asked_sessions(b"sessions=" + most) == tuple(range(1, CATCH_UP_MAX + 1))
    assert asked_sessions(b"sessions=" + most + b",99") is None
