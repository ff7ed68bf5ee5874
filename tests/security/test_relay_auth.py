"""The portal's relay logs in to the desktop; the VNC password never reaches the browser
(issue 14, finding 2), and an open relay ends with its sign-in (finding 7).

Through a real portal process, Celery worker and node agent (tests/integration/stack.py)
with a real tiny desktop: people sign in through the real login form; the desktop page and
the session API carry no password; the relay offers the browser security type None only and
the desktop's ServerInit arrives; a stranger is refused; a browser asking for VNC
authentication is closed; logging out closes that sign-in's relay (another sign-in's relay
still gets frames), an admin ending the user's sessions closes that one, and disabling the
account closes a relay too. Without processes: the
browser's side of the handshake for each RFB version, and anything but type None refused.
"""

from __future__ import annotations

import re
import struct
from contextlib import ExitStack

import httpx
import pytest
from django.contrib.auth.models import User
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import ClientConnection, connect

from portal.live.desktop_relay import BrowserHandshake, RfbError
from scheduling.models import Session
from scheduling.services.api_tokens import end_every_session
from scheduling.services.nodes import do_create_join_token
from tests.conftest import TEST_IMAGE, give_thesis_grant
from tests.integration.conftest import (  # noqa: F401 - fixtures
    docker_engine,
    require_image,
    stack,
    stack_options,
)
from tests.integration.stack import wait_for, write_fleet

RFB_38 = b"RFB 003.008\n"
SECURITY_NONE, SECURITY_VNC_AUTH = 1, 2
CLOSE_WAIT_S = 30  # the relay checks its sign-in every 2 s


def sign_in(url: str, username: str) -> httpx.Client:
    """A browser-like client signed in through the real login form."""
    client = httpx.Client(base_url=url, timeout=10)
    form = client.get("/login/").text
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form)
    assert token is not None
    answer = client.post(
        "/login/",
        data={"username": username, "password": "pw-" + username, "csrfmiddlewaretoken": token[1]},
    )
    assert answer.status_code == 302, answer.text
    return client


def open_relay(url: str, browser: httpx.Client, session_id: int) -> ClientConnection:
    cookies = "; ".join(f"{name}={value}" for name, value in browser.cookies.items())
    return connect(
        url.replace("http://", "ws://") + f"/ws/desktop/{session_id}/",
        additional_headers={"Cookie": cookies, "Origin": url},
        open_timeout=10,
        max_size=None,
    )


class Rfb:
    """The browser's side of RFB over the relay, with exact-length reads."""

    def __init__(self, connection: ClientConnection) -> None:
        self.connection = connection
        self.buffer = b""

    def read(self, length: int) -> bytes:
        while len(self.buffer) < length:
            message = self.connection.recv(timeout=15)
            self.buffer += message if isinstance(message, bytes) else message.encode()
        data, self.buffer = self.buffer[:length], self.buffer[length:]
        return data

    def security_types(self) -> list[int]:
        assert self.read(12) == RFB_38
        self.connection.send(RFB_38)
        (count,) = self.read(1)
        return list(self.read(count))

    def log_in(self) -> tuple[int, int, bytes]:
        """The handshake with type None up to ServerInit: (width, height, desktop name)."""
        assert self.security_types() == [SECURITY_NONE]
        self.connection.send(bytes([SECURITY_NONE]))
        assert self.read(4) == b"\0\0\0\0"  # SecurityResult: OK
        self.connection.send(b"\x01")  # ClientInit, shared
        width, height = struct.unpack(">HH", self.read(4))
        self.read(16)  # the pixel format
        (length,) = struct.unpack(">I", self.read(4))
        return width, height, self.read(length)

    def frame(self) -> int:
        """Ask for the whole screen; the message type of the desktop's answer."""
        self.connection.send(struct.pack(">BBHHHH", 3, 0, 0, 0, 64, 64))
        return self.read(1)[0]


def closed_with(connection: ClientConnection) -> int | None:
    """Wait for the relay to close the connection (bounded); its close code."""
    try:
        while True:
            connection.recv(timeout=CLOSE_WAIT_S)
    except ConnectionClosed as closed:
        return closed.rcvd.code if closed.rcvd else None


@pytest.mark.integration
@pytest.mark.docker
def test_the_relay_logs_in_for_the_owner_and_ends_with_the_sign_in(
    stack,  # noqa: F811
    owner,
    stranger,
    profile,
    docker_engine,  # noqa: F811
    require_image,  # noqa: F811
    tmp_path,
) -> None:  # type: ignore[no-untyped-def]
    require_image(TEST_IMAGE)
    stack.start_agent(
        do_create_join_token(stack.node, actor="test"),
        write_fleet(tmp_path / "fleet.yaml", stack.node, 2),
    )
    give_thesis_grant(owner)
    browser = sign_in(stack.url, "ada")
    created = browser.post(
        "/api/v1/sessions/",
        json={"profile": profile.pk, "purpose": "thesis"},
        headers={"X-CSRFToken": browser.cookies["csrftoken"]},
    )
    assert created.status_code == 201, created.text
    session_id = created.json()["id"]
    api = f"/api/v1/sessions/{session_id}/"
    wait_for(lambda: browser.get(api).json()["state"] == "RUNNING", 90, "RUNNING")
    secret = Session.objects.get(pk=session_id).vnc_password
    assert len(secret) == 8

    page = browser.get(f"/desktop/{session_id}/")
    assert page.status_code == 200 and 'id="screen"' in page.text
    assert secret not in page.text and "data-password" not in page.text
    assert secret not in browser.get(api).text

    with ExitStack() as relays:
        check_relays(stack.url, relays, browser, owner, session_id)


def check_relays(url: str, relays: ExitStack, browser: httpx.Client, owner, session_id) -> None:  # type: ignore[no-untyped-def]
    """The relays of one running desktop: opened by the owner (two sign-ins), a stranger
    and a browser asking for VNC authentication."""

    def relay(client: httpx.Client) -> Rfb:
        return Rfb(relays.enter_context(open_relay(url, client, session_id)))

    first = relay(browser)
    width, height, name = first.log_in()
    assert (width, height, name) == (1280, 800, b"Deskpool")
    assert first.frame() == 0  # FramebufferUpdate

    # A browser cannot try passwords: VNC authentication is not on offer, and asking for it
    # ends the connection.
    guessing = relay(browser)
    assert guessing.security_types() == [SECURITY_NONE]
    guessing.connection.send(bytes([SECURITY_VNC_AUTH]))
    assert closed_with(guessing.connection) is not None

    with pytest.raises(InvalidStatus) as refused:
        relay(sign_in(url, "ben"))
    assert refused.value.response.status_code == 403

    second = relay(sign_in(url, "ada"))
    second.log_in()

    logout = browser.post("/logout/", headers={"X-CSRFToken": browser.cookies["csrftoken"]})
    assert logout.status_code == 302
    assert closed_with(first.connection) == 4401
    assert second.frame() == 0  # another sign-in's relay is still open

    end_every_session(owner, actor="admin")  # the admin's "end every session"
    assert closed_with(second.connection) == 4401

    third = relay(sign_in(url, "ada"))
    third.log_in()
    User.objects.filter(pk=owner.pk).update(is_active=False)
    assert closed_with(third.connection) == 4401


@pytest.mark.parametrize(
    ("version", "offer", "result"),
    [
        (b"RFB 003.008\n", b"\x01\x01", b"\0\0\0\0"),  # noVNC's version
        (b"RFB 003.007\n", b"\x01\x01", b""),  # 3.7: no SecurityResult for None
        (b"RFB 003.889\n", b"\x01\x01", b"\0\0\0\0"),  # newer minor: treated as 3.8
    ],
)
def test_the_browser_is_offered_security_type_none_only(version, offer, result) -> None:
    handshake = BrowserHandshake()
    assert handshake.feed(version[:5]) == (b"", b"")  # a version split over frames
    assert handshake.feed(version[5:]) == (offer, b"")
    # The choice and the ClientInit in one frame: the ClientInit goes on to the desktop.
    assert handshake.feed(b"\x01\x01") == (result, b"\x01")
    assert handshake.done


def test_rfb_3_3_gets_type_none_named_by_the_server() -> None:
    handshake = BrowserHandshake()
    assert handshake.feed(b"RFB 003.003\n\x01") == (b"\0\0\0\x01", b"\x01")
    assert handshake.done


@pytest.mark.parametrize("frames", [[b"HTTP/1.1 200\n"], [b"RFB 003.008\n", b"\x02"]])
def test_anything_else_ends_the_handshake(frames) -> None:
    handshake = BrowserHandshake()
    with pytest.raises(RfbError):
        for frame in frames:
            handshake.feed(frame)
    assert not handshake.done
