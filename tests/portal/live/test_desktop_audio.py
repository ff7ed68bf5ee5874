"""The audio relay (``/ws/desktop/<id>/audio/``): a desktop's sound, for whoever may open it.

In process, through the portal's ASGI application (cookies, Origin check, the relay) and a
fake desktop sound server on 127.0.0.1 that speaks :mod:`nodeagent.desktop_audio`'s exchange
(challenge, HMAC answer checked, ``OK`` and the format, then PCM; or ``NO``):

- the owner gets the format as JSON, then the PCM unchanged in frames of at most
  ``AUDIO_CHUNK_BYTES``, then a normal close when the desktop ends the stream; what the
  browser sends is dropped and never reaches the desktop;
- refusals: 4403 to a stranger, to no sign-in and for a desktop no longer running; 4404 for
  a desktop without sound (a stranger still gets 4403); 4502 for a wrong secret, a port
  where nothing listens, a desktop that says nothing, and a node address that is not a
  management host (the desktop is then never reached);
- every listener is audited (``desktop.sound_opened``) as the owner or an admin;
- the socket ends with the sign-in (4401) and the right (4403), and the relay hangs up on
  the desktop.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import os
import socket
from collections.abc import Awaitable, Callable

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import User
from django.contrib.sessions.backends.db import SessionStore

from nodeagent.desktop_audio import (
    ACCEPTED,
    ANSWER_LENGTH,
    CHALLENGE_LENGTH,
    FORMAT,
    MAGIC,
    REFUSED,
    audio_auth_response,
)
from portal.asgi import application
from portal.live import desktop_audio_relay
from scheduling.choices import AuditKind, SessionState
from scheduling.models import AuditEvent, Session
from tests.security.test_bad_input import signed_in_cookie
from tests.security.test_relay_limits import running_session

pytestmark = pytest.mark.django_db(transaction=True)

SECRET = "secret12"  # running_session's vnc_password
WAIT_S = 10
FORMAT_JSON = {"rate": 48000, "channels": 2, "format": "s16le"}
BROWSER = ("10.9.8.7", 50000)


class FakeSound:
    """The desktop's sound port: the exchange, then ``script`` (PCM to send, or an event to
    wait for); with ``keep_open``, then reads until the portal hangs up (``received``)."""

    def __init__(self, secret: str = SECRET, script: tuple = (), keep_open: bool = False) -> None:
        self.secret = secret
        self.script = script
        self.keep_open = keep_open
        self.connections = 0
        self.received = b""
        self.hung_up = asyncio.Event()

    async def handler(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        challenge = os.urandom(CHALLENGE_LENGTH)
        writer.write(MAGIC + challenge)
        answer = await reader.readexactly(ANSWER_LENGTH)
        if not hmac.compare_digest(answer, audio_auth_response(self.secret, challenge)):
            writer.write(REFUSED)
            await writer.drain()
            writer.close()
            return
        writer.write(ACCEPTED + FORMAT.pack(48000, 2, 16))
        for step in self.script:
            if isinstance(step, asyncio.Event):
                await step.wait()
            else:
                writer.write(step)
                await writer.drain()
        if self.keep_open:
            self.received = await reader.read()  # until the portal closes its side
            self.hung_up.set()
        writer.close()


async def from_browser_address(scope: dict, receive, send) -> None:  # type: ignore[no-untyped-def]
    """The portal's application, for a browser at :data:`BROWSER` (daphne's ``client``)."""
    await application({**scope, "client": BROWSER}, receive, send)


def listener(session_id: int, cookie: bytes | None) -> WebsocketCommunicator:
    """The browser's socket to the audio relay, signed in with ``cookie`` (or not)."""
    headers = [(b"origin", b"http://testserver"), (b"host", b"testserver")]
    if cookie is not None:
        headers.append((b"cookie", cookie))
    path = f"/ws/desktop/{session_id}/audio/"
    return WebsocketCommunicator(from_browser_address, path, headers)


def sound_session(user: User, profile, port: int, address: str = "127.0.0.1") -> Session:  # type: ignore[no-untyped-def]
    """A running desktop on ``address`` whose sound is at ``port``."""
    session = running_session(user, profile, port, address)
    Session.objects.filter(pk=session.pk).update(desktop_audio_port=port)
    return session


async def received_pcm(browser: WebsocketCommunicator, length: int) -> list[bytes]:
    """The binary frames that carry the next ``length`` bytes of PCM."""
    frames: list[bytes] = []
    while sum(map(len, frames)) < length:
        frames.append(await browser.receive_from(timeout=WAIT_S))
    return frames


async def close_of(browser: WebsocketCommunicator) -> dict:
    output = await browser.receive_output(timeout=WAIT_S)
    assert output["type"] == "websocket.close", output
    return output


async def refused_with(browser: WebsocketCommunicator) -> int:
    connected, code = await browser.connect(timeout=WAIT_S)
    assert not connected
    return code


def with_sound(sound: FakeSound, body: Callable[[int], Awaitable[object]]) -> object:
    async def run() -> object:
        server = await asyncio.start_server(sound.handler, "127.0.0.1", 0)
        async with server:
            return await body(server.sockets[0].getsockname()[1])

    return async_to_sync(run)()


def test_the_owner_hears_the_format_then_the_pcm_unchanged(owner, profile):
    pcm = os.urandom(3 * desktop_audio_relay.AUDIO_CHUNK_BYTES + 1000)
    cookie = signed_in_cookie(owner)

    async def body(port: int) -> tuple:
        session = await database_sync_to_async(sound_session)(owner, profile, port)
        browser = listener(session.pk, cookie)
        connected, _ = await browser.connect(timeout=WAIT_S)
        assert connected
        first = await browser.receive_from(timeout=WAIT_S)
        frames = await received_pcm(browser, len(pcm))
        close = await close_of(browser)  # the desktop ended the stream
        await browser.disconnect()
        return first, frames, close

    first, frames, close = with_sound(FakeSound(script=(pcm,)), body)  # type: ignore[misc]
    assert json.loads(first) == FORMAT_JSON
    assert all(isinstance(f, bytes) for f in frames)
    assert b"".join(frames) == pcm
    assert max(map(len, frames)) <= desktop_audio_relay.AUDIO_CHUNK_BYTES == 16384
    assert close.get("code", 1000) == 1000


def test_what_the_browser_sends_is_dropped_and_the_sound_goes_on(owner, profile):
    before, after = os.urandom(4000), os.urandom(5000)
    cookie = signed_in_cookie(owner)
    go = asyncio.Event()
    sound = FakeSound(script=(before, go, after), keep_open=True)

    async def body(port: int) -> bytes:
        session = await database_sync_to_async(sound_session)(owner, profile, port)
        browser = listener(session.pk, cookie)
        assert (await browser.connect(timeout=WAIT_S))[0]
        assert json.loads(await browser.receive_from(timeout=WAIT_S)) == FORMAT_JSON
        assert b"".join(await received_pcm(browser, len(before))) == before
        await browser.send_to(text_data="{not json")
        await browser.send_to(bytes_data=b"\x00" * 70000)
        go.set()
        heard = b"".join(await received_pcm(browser, len(after)))
        await browser.disconnect()
        await asyncio.wait_for(sound.hung_up.wait(), WAIT_S)
        return heard

    assert with_sound(sound, body) == after
    assert sound.received == b""  # nothing of the browser's reached the desktop


def test_a_stranger_no_sign_in_and_an_ended_desktop_are_refused_with_4403(owner, stranger, profile):
    sound = FakeSound(script=(b"\x01\x02",))
    cookies = [signed_in_cookie(stranger), None, signed_in_cookie(owner)]

    async def body(port: int) -> list[int]:
        session = await database_sync_to_async(sound_session)(owner, profile, port)
        codes = [await refused_with(listener(session.pk, c)) for c in cookies[:2]]
        await database_sync_to_async(
            lambda: Session.objects.filter(pk=session.pk).update(state=SessionState.ENDED)
        )()
        return [*codes, await refused_with(listener(session.pk, cookies[2]))]

    assert with_sound(sound, body) == [4403, 4403, 4403]
    assert sound.connections == 0
    assert not AuditEvent.objects.filter(kind=AuditKind.DESKTOP_SOUND_OPENED).exists()


def test_a_desktop_without_sound_is_4404_to_its_owner_and_4403_to_a_stranger(
    owner, stranger, profile
):
    session = running_session(owner, profile, 5900)
    assert session.desktop_audio_port is None
    cookies = [signed_in_cookie(owner), signed_in_cookie(stranger)]

    async def body() -> list[int]:
        return [await refused_with(listener(session.pk, cookie)) for cookie in cookies]

    assert async_to_sync(body)() == [desktop_audio_relay.CLOSE_NO_SOUND, 4403]
    assert desktop_audio_relay.CLOSE_NO_SOUND == 4404


def test_a_desktop_that_refuses_the_secret_closes_4502(owner, profile):
    sound = FakeSound(secret="other123", script=(b"\x01\x02",))
    cookie = signed_in_cookie(owner)

    async def body(port: int) -> int:
        session = await database_sync_to_async(sound_session)(owner, profile, port)
        return await refused_with(listener(session.pk, cookie))

    assert with_sound(sound, body) == 4502
    assert sound.connections == 1  # reached, and it said NO
    assert not AuditEvent.objects.filter(kind=AuditKind.DESKTOP_SOUND_OPENED).exists()


def test_a_port_where_nothing_listens_closes_4502(owner, profile):
    with socket.socket() as probe:  # a port just freed: nothing listens there
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    session = sound_session(owner, profile, port)
    code = async_to_sync(refused_with)(listener(session.pk, signed_in_cookie(owner)))
    assert code == 4502


def test_a_desktop_that_says_nothing_closes_4502_in_time(owner, profile, monkeypatch):
    monkeypatch.setattr(desktop_audio_relay, "UPSTREAM_TIMEOUT_S", 0.2)
    cookie = signed_in_cookie(owner)

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()

    async def run() -> int:
        server = await asyncio.start_server(silent, "127.0.0.1", 0)
        async with server:
            port = server.sockets[0].getsockname()[1]
            session = await database_sync_to_async(sound_session)(owner, profile, port)
            return await refused_with(listener(session.pk, cookie))

    assert async_to_sync(run)() == 4502


@pytest.mark.parametrize("address", ["127.0.0.1:{port}/x?", "localhost:{port}#", "8.8.8.8"])
def test_a_node_address_that_is_not_a_management_host_closes_4502(owner, profile, address):
    sound = FakeSound(script=(b"\x01\x02",))
    cookie = signed_in_cookie(owner)

    async def body(port: int) -> int:
        # The sound port is not the fake's: only a steered relay would reach it.
        session = await database_sync_to_async(sound_session)(
            owner, profile, 1, address.format(port=port)
        )
        return await refused_with(listener(session.pk, cookie))

    assert with_sound(sound, body) == 4502
    assert sound.connections == 0


def test_every_listener_is_audited_as_the_owner_or_an_admin(owner, admin_user, profile):
    sound = FakeSound(script=(b"\x01\x02",))
    cookies = [signed_in_cookie(owner), signed_in_cookie(admin_user)]

    async def body(port: int) -> int:
        session = await database_sync_to_async(sound_session)(owner, profile, port)
        for cookie in cookies:
            browser = listener(session.pk, cookie)
            assert (await browser.connect(timeout=WAIT_S))[0]
            assert json.loads(await browser.receive_from(timeout=WAIT_S)) == FORMAT_JSON
            await browser.disconnect()
        return session.pk

    session_id = with_sound(sound, body)
    events = AuditEvent.objects.filter(kind=AuditKind.DESKTOP_SOUND_OPENED).order_by("pk")
    assert [(e.actor, e.session_id, e.data) for e in events] == [
        ("user:ada", session_id, {"viewer": "ada", "owner": "ada", "as": "owner"}),
        ("user:root", session_id, {"viewer": "root", "owner": "ada", "as": "admin"}),
    ]
    assert events[0].node_id == Session.objects.get(pk=session_id).node_id
    assert [e.address for e in events] == ["10.9.8.7"] * 2  # the browser's
    assert events[0].get_kind_display() == "Desktop sound opened"
    # Sound is not a viewer: it does not keep a desktop from idling.
    assert not AuditEvent.objects.filter(kind=AuditKind.DESKTOP_OPENED).exists()


def sign_out(user: User, cookie: bytes) -> None:
    SessionStore(cookie.decode().split("=", 1)[1]).delete()


def demote(user: User, cookie: bytes) -> None:
    User.objects.filter(pk=user.pk).update(is_staff=False)


@pytest.mark.parametrize(("change", "code"), [(sign_out, 4401), (demote, 4403)])
def test_the_sound_ends_with_the_sign_in_and_the_right(
    owner, admin_user, profile, monkeypatch, change, code
):
    monkeypatch.setattr(desktop_audio_relay, "SIGN_IN_CHECK_S", 0.05)
    sound = FakeSound(script=(b"\x01\x02",), keep_open=True)
    cookie = signed_in_cookie(admin_user)

    async def body(port: int) -> dict:
        session = await database_sync_to_async(sound_session)(owner, profile, port)
        browser = listener(session.pk, cookie)
        assert (await browser.connect(timeout=WAIT_S))[0]
        assert json.loads(await browser.receive_from(timeout=WAIT_S)) == FORMAT_JSON
        assert await browser.receive_from(timeout=WAIT_S) == b"\x01\x02"
        await asyncio.sleep(0.2)  # a few checks pass while nothing changed
        await database_sync_to_async(change)(admin_user, cookie)
        close = await close_of(browser)
        await asyncio.wait_for(sound.hung_up.wait(), WAIT_S)  # and the desktop's side
        await browser.disconnect()
        return close

    assert with_sound(sound, body)["code"] == code  # type: ignore[index]
