"""The desktop relay against a desktop that is not websockify (issue 25).

A student can replace websockify inside their own desktop. In process, through the portal's
ASGI application (cookies, Origin check, the relay) and a fake desktop served by the
websockets library on 127.0.0.1 that does the RFB handshake with VNC authentication:

- a desktop message over ``RELAY_MAX_MESSAGE_BYTES`` ends the relay with 4413 and a reason
  in the person's language (websockets refuses it from its header: nothing of it is read);
  so does a browser message over it;
- the relay connects only to a valid host:port in the management network: a stored address
  with a path or a fragment (from before registration checked it) is refused with 4502, and
  the fake desktop is never reached;
- every accepted viewer is audited: who, whose desktop, as its owner or as an admin, and the
  console's audit log names it (and a node's address change) in words, in both languages.
"""

from __future__ import annotations

import struct
from collections.abc import Awaitable, Callable

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import User
from django.test import Client
from websockets.asyncio.server import ServerConnection, serve

from people.models import Member
from portal.asgi import application
from portal.live import desktop_relay
from scheduling.choices import AuditKind, SessionState
from scheduling.models import AuditEvent, Node, Session
from scheduling.services.audit import record
from tests.security.test_bad_input import signed_in_cookie

pytestmark = pytest.mark.django_db(transaction=True)

RFB_38 = b"RFB 003.008\n"
SECURITY_NONE, SECURITY_VNC_AUTH = 1, 2
WAIT_S = 10


class FakeDesktop:
    """websockify's part up to a successful login, then ``after`` (the test's behaviour)."""

    def __init__(self, after: Callable[[ServerConnection], Awaitable[None]]) -> None:
        self.after = after
        self.connections = 0

    async def handler(self, connection: ServerConnection) -> None:
        self.connections += 1
        await connection.send(RFB_38)
        assert await connection.recv() == RFB_38
        await connection.send(bytes([1, SECURITY_VNC_AUTH]))
        assert await connection.recv() == bytes([SECURITY_VNC_AUTH])
        await connection.send(b"c" * 16)  # the challenge
        assert len(await connection.recv()) == 16  # whatever the answer: accepted
        await connection.send(struct.pack(">I", 0))
        await self.after(connection)


def running_session(user: User, profile, port: int, address: str = "127.0.0.1") -> Session:  # type: ignore[no-untyped-def]
    node = Node.objects.create(hostname=f"fake-{port}", address=address)
    return Session.objects.create(
        user=user,
        profile=profile,
        purpose="hobby",
        state=SessionState.RUNNING,
        node=node,
        desktop_port=port,
        vnc_password="secret12",
    )


def relay(session_id: int, cookie: bytes) -> WebsocketCommunicator:
    """The browser's socket to the relay, signed in with ``cookie`` (signed_in_cookie)."""
    return WebsocketCommunicator(
        application,
        f"/ws/desktop/{session_id}/",
        headers=[
            (b"cookie", cookie),
            (b"origin", b"http://testserver"),
            (b"host", b"testserver"),
        ],
    )


async def log_in(browser: WebsocketCommunicator) -> None:
    """The browser's handshake with the relay, type None, then its ClientInit."""
    connected, _ = await browser.connect(timeout=WAIT_S)
    assert connected
    assert await browser.receive_from(timeout=WAIT_S) == RFB_38
    await browser.send_to(bytes_data=RFB_38)
    assert await browser.receive_from(timeout=WAIT_S) == bytes([1, SECURITY_NONE])
    await browser.send_to(bytes_data=bytes([SECURITY_NONE]))
    assert await browser.receive_from(timeout=WAIT_S) == b"\0\0\0\0"
    await browser.send_to(bytes_data=b"\x01")  # ClientInit


async def closed(browser: WebsocketCommunicator) -> dict:
    """What the relay sends until it closes; the close message."""
    while True:
        output = await browser.receive_output(timeout=WAIT_S)
        if output["type"] == "websocket.close":
            return output


def with_desktop(desktop: FakeDesktop, body: Callable[[int], Awaitable[dict]]) -> dict:
    async def run() -> dict:
        async with serve(desktop.handler, "127.0.0.1", 0, max_size=None) as server:
            port = server.sockets[0].getsockname()[1]
            return await body(port)

    return async_to_sync(run)()


@pytest.mark.parametrize(
    ("language", "words"),
    [("en", "The desktop sent more at once"), ("zh-hans", "桌面")],
)
def test_a_desktop_message_over_the_limit_closes_the_relay_with_a_reason(
    owner, profile, language, words
):
    Member.objects.create(user=owner, language=language, time_zone="UTC")
    big = b"x" * (2 * 1024 * 1024)  # twice the default limit (1 MiB)

    async def flood(connection: ServerConnection) -> None:
        await connection.recv()  # the ClientInit
        await connection.send(big)
        await connection.wait_closed()

    cookie = signed_in_cookie(owner)

    async def body(port: int) -> dict:
        session = await database_sync_to_async(running_session)(owner, profile, port)
        browser = relay(session.pk, cookie)
        await log_in(browser)
        return await closed(browser)

    close = with_desktop(FakeDesktop(flood), body)
    assert close["code"] == desktop_relay.CLOSE_TOO_BIG == 4413
    assert words in close["reason"]
    assert len(close["reason"].encode()) <= 123


def test_a_browser_message_over_the_limit_closes_the_relay_with_a_reason(owner, profile):
    received: list[int] = []

    async def listen(connection: ServerConnection) -> None:
        async for message in connection:
            received.append(len(message))

    cookie = signed_in_cookie(owner)

    async def body(port: int) -> dict:
        session = await database_sync_to_async(running_session)(owner, profile, port)
        browser = relay(session.pk, cookie)
        await log_in(browser)
        await browser.send_to(bytes_data=b"\x05" * (1024 * 1024 + 1))
        return await closed(browser)

    close = with_desktop(FakeDesktop(listen), body)
    assert close["code"] == 4413
    assert "This page sent more at once" in close["reason"]
    assert max(received, default=0) <= 1024 * 1024  # nothing over the limit went through


@pytest.mark.parametrize("address", ["127.0.0.1:{port}/x?", "localhost:{port}#", "8.8.8.8"])
def test_the_relay_refuses_a_node_address_that_is_not_a_management_host(owner, profile, address):
    async def idle(connection: ServerConnection) -> None:
        await connection.wait_closed()

    desktop = FakeDesktop(idle)

    cookie = signed_in_cookie(owner)

    async def body(port: int) -> dict:
        # The desktop's port is not the fake desktop's: only a steered relay would reach it.
        session = await database_sync_to_async(running_session)(
            owner, profile, 1, address.format(port=port)
        )
        browser = relay(session.pk, cookie)
        connected, code = await browser.connect(timeout=WAIT_S)
        assert not connected
        return {"code": code}

    close = with_desktop(desktop, body)
    assert close["code"] == desktop_relay.CLOSE_UNREACHABLE
    assert desktop.connections == 0


def test_every_accepted_viewer_is_audited_as_the_owner_or_an_admin(owner, admin_user, profile):
    async def idle(connection: ServerConnection) -> None:
        await connection.wait_closed()

    cookies = [signed_in_cookie(owner), signed_in_cookie(admin_user)]

    async def body(port: int) -> dict:
        session = await database_sync_to_async(running_session)(owner, profile, port)
        for cookie in cookies:
            browser = relay(session.pk, cookie)
            await log_in(browser)
            await browser.disconnect()
        return {"session": session.pk}

    session_id = with_desktop(FakeDesktop(idle), body)["session"]
    events = AuditEvent.objects.filter(kind=AuditKind.DESKTOP_OPENED).order_by("pk")
    assert [(e.actor, e.session_id, e.data) for e in events] == [
        ("user:ada", session_id, {"viewer": "ada", "owner": "ada", "as": "owner"}),
        ("user:root", session_id, {"viewer": "root", "owner": "ada", "as": "admin"}),
    ]
    assert events[0].get_kind_display() == "Desktop opened"
    assert events[0].node_id == Session.objects.get(pk=session_id).node_id


def test_an_admin_made_a_plain_user_loses_the_screen_they_watch(
    owner, admin_user, profile, monkeypatch
):
    monkeypatch.setattr(desktop_relay, "SIGN_IN_CHECK_S", 0.05)

    async def idle(connection: ServerConnection) -> None:
        await connection.wait_closed()

    cookie = signed_in_cookie(admin_user)

    async def body(port: int) -> dict:
        session = await database_sync_to_async(running_session)(owner, profile, port)
        browser = relay(session.pk, cookie)
        await log_in(browser)
        await database_sync_to_async(
            lambda: User.objects.filter(pk=admin_user.pk).update(is_staff=False)
        )()
        return await closed(browser)

    assert with_desktop(FakeDesktop(idle), body)["code"] == 4403


@pytest.mark.parametrize(
    ("language", "words"),
    [
        ("en", ["Desktop opened", "Node address changed"]),
        ("zh-hans", ["桌面已打开", "节点地址已变更"]),
    ],
)
def test_the_console_audit_log_names_desktop_opens_and_address_changes_in_words(
    admin_user, language, words
):
    Member.objects.create(user=admin_user, language=language, time_zone="UTC")
    record(AuditKind.DESKTOP_OPENED, "user:root", data={"viewer": "root", "as": "admin"})
    record(
        AuditKind.NODE_ADDRESS_CHANGED, "node:gpu-a", data={"old": "10.0.0.5", "new": "10.0.0.6"}
    )
    browser = Client()
    browser.force_login(admin_user)
    page = browser.get("/console/audit/").content.decode()
    assert all(word in page for word in words)
