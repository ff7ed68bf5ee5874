"""A desktop through its node's gateway, with every real part (issue 34; issues 14 and 15).

A real portal process, Celery worker and node agent (tests/integration/stack.py) with a real
tiny desktop; the agent starts the real gateway. People sign in through the real login form
and ask the portal for tickets as the page does (``POST /api/v1/sessions/<id>/ticket/``,
the session cookie and the CSRF header), then open the gateway's URL and send the ticket
first:

- the VNC password never reaches the page, the session API or the ticket; the gateway logs
  in and offers the browser security type None only; the desktop's ServerInit arrives; a
  browser asking for VNC authentication is closed; a ticket is good once (4409); a stranger
  gets no ticket;
- revocation travels with the desired state: logging out closes that sign-in's screen
  (4401) while another sign-in's stays open; an admin ending the person's sessions closes
  that one; disabling the account closes the next; stopping the desktop closes a screen
  with 4410; each close's delay is printed (the issue's bound is 2 s);
- idle detection's inputs come from the gateway: the keyboard and mouse events a browser
  sends (not clipboard text that looks like them, not screen requests) are counted, the
  viewer is counted open and gone, and the agent's heartbeats bring the desktop's CPU.
Without processes: the browser's side of the handshake for each RFB version.
"""

from __future__ import annotations

import re
import struct
import time
from contextlib import ExitStack

import httpx
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from nodeagent.gateway.codes import (
    CLOSE_SESSION_ENDED,
    CLOSE_SIGNED_OUT,
    CLOSE_TICKET_REPLAYED,
)
from nodeagent.rfb_login import BrowserHandshake, RfbError
from scheduling.models import Session, SessionActivity
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
CLOSE_WAIT_S = 30  # a bound for the test; the delays are printed
FLUSH_WAIT_S = 30  # the gateway sends its counts every 5 s
KEY_DOWN = struct.pack(">BBHI", 4, 1, 0, 0x61)
KEY_UP = struct.pack(">BBHI", 4, 0, 0, 0x61)
POINTER = struct.pack(">BBHH", 5, 0, 10, 20)


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


def ticket(browser: httpx.Client, session_id: int, purpose: str = "screen") -> httpx.Response:
    return browser.post(
        f"/api/v1/sessions/{session_id}/ticket/",
        json={"purpose": purpose},
        headers={"X-CSRFToken": browser.cookies["csrftoken"]},
    )


def open_screen(page_url: str, url: str, text: str) -> ClientConnection:
    """The page's socket to the gateway: its Origin is the portal's page; the ticket first."""
    connection = connect(url, origin=page_url, open_timeout=10, max_size=None)  # type: ignore[arg-type]
    connection.send(text)
    return connection


class Rfb:
    """The browser's side of RFB through the gateway, with exact-length reads."""

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


def closed_with(connection: ClientConnection, since: float, what: str) -> int | None:
    """Wait for the gateway to close the connection (bounded); its close code. Prints how
    long after ``since`` it came."""
    try:
        while True:
            connection.recv(timeout=CLOSE_WAIT_S)
    except ConnectionClosed as closed:
        print(f"{what}: closed {time.monotonic() - since:.2f} s after")
        return closed.rcvd.code if closed.rcvd else None


def running_desktop(portal, owner, profile, tmp_path) -> tuple[httpx.Client, int]:  # type: ignore[no-untyped-def]
    portal.remove_volumes = True  # the homes this test makes go with its stack
    portal.start_agent(
        do_create_join_token(portal.node, actor="test"),
        write_fleet(tmp_path / "fleet.yaml", portal.node, 3),
    )
    give_thesis_grant(owner)
    browser = sign_in(portal.url, "ada")
    created = browser.post(
        "/api/v1/sessions/",
        json={"profile": profile.pk, "purpose": "thesis"},
        headers={"X-CSRFToken": browser.cookies["csrftoken"]},
    )
    assert created.status_code == 201, created.text
    session_id = created.json()["id"]
    api = f"/api/v1/sessions/{session_id}/"
    wait_for(lambda: browser.get(api).json()["state"] == "RUNNING", 90, "RUNNING")
    return browser, session_id


@pytest.mark.integration
@pytest.mark.docker
def test_the_gateway_logs_in_for_the_owner_and_closes_with_the_sign_in(
    stack,  # noqa: F811
    owner,
    stranger,
    profile,
    docker_engine,  # noqa: F811
    require_image,  # noqa: F811
    tmp_path,
) -> None:  # type: ignore[no-untyped-def]
    require_image(TEST_IMAGE)
    browser, session_id = running_desktop(stack, owner, profile, tmp_path)
    secret = Session.objects.get(pk=session_id).vnc_password
    assert len(secret) == 8
    page = browser.get(f"/desktop/{session_id}/")
    assert page.status_code == 200 and 'id="screen"' in page.text
    assert secret not in page.text and "data-password" not in page.text
    assert secret not in browser.get(f"/api/v1/sessions/{session_id}/").text

    with ExitStack() as screens:

        def screen(client: httpx.Client) -> tuple[Rfb, str, str]:
            answer = ticket(client, session_id)
            assert answer.status_code == 201, answer.text
            url, text = answer.json()["url"], answer.json()["ticket"]
            assert secret not in answer.text
            connection = screens.enter_context(open_screen(stack.url, url, text))
            return Rfb(connection), url, text

        first, url, used = screen(browser)
        assert first.log_in() == (1280, 800, b"Deskpool")
        assert first.frame() == 0  # FramebufferUpdate

        # A ticket opens once.
        replay = screens.enter_context(open_screen(stack.url, url, used))
        assert closed_with(replay, time.monotonic(), "a replayed ticket") == CLOSE_TICKET_REPLAYED

        # A browser cannot try passwords: VNC authentication is not on offer.
        guessing, _, _ = screen(browser)
        assert guessing.security_types() == [SECURITY_NONE]
        guessing.connection.send(bytes([SECURITY_VNC_AUTH]))
        assert closed_with(guessing.connection, time.monotonic(), "asking for VNC auth")

        assert ticket(sign_in(stack.url, "ben"), session_id).status_code in (403, 404)

        second, _, _ = screen(sign_in(stack.url, "ada"))
        second.log_in()

        logout = browser.post("/logout/", headers={"X-CSRFToken": browser.cookies["csrftoken"]})
        assert logout.status_code == 302
        code = closed_with(first.connection, time.monotonic(), "logout")
        assert code == CLOSE_SIGNED_OUT
        assert second.frame() == 0  # another sign-in's screen is still open

        ended = time.monotonic()
        end_every_session(owner, actor="admin")  # the admin's "end every session"
        assert closed_with(second.connection, ended, "end every session") == CLOSE_SIGNED_OUT

        third, _, _ = screen(sign_in(stack.url, "ada"))
        third.log_in()
        disabled = time.monotonic()
        owner.is_active = False
        owner.save()
        assert closed_with(third.connection, disabled, "account disabled") == CLOSE_SIGNED_OUT


@pytest.mark.integration
@pytest.mark.docker
@pytest.mark.lifecycle
def test_the_gateway_counts_input_and_viewers_and_a_stop_closes_the_screen(
    stack,  # noqa: F811
    owner,
    profile,
    docker_engine,  # noqa: F811
    require_image,  # noqa: F811
    tmp_path,
) -> None:  # type: ignore[no-untyped-def]
    require_image(TEST_IMAGE)
    browser, session_id = running_desktop(stack, owner, profile, tmp_path)

    def activity() -> SessionActivity | None:
        return SessionActivity.objects.filter(session_id=session_id).first()

    def cpu_samples() -> list:
        row = activity()
        return [s for s in row.samples if s[2] is not None] if row else []

    samples = wait_for(cpu_samples, 120, "a CPU sample from the agent")  # two docker stats
    assert all(gpu is None and 0 <= cpu <= 100 for _, gpu, cpu in samples)

    answer = ticket(browser, session_id)
    assert answer.status_code == 201, answer.text
    with open_screen(stack.url, answer.json()["url"], answer.json()["ticket"]) as connection:
        rfb = Rfb(connection)
        rfb.log_in()
        wait_for(lambda: activity().viewers == 1, FLUSH_WAIT_S, "a viewer")  # type: ignore[union-attr]
        assert activity().input_events == 0  # type: ignore[union-attr]
        # 2 keys and 3 pointer events, in one message with a screen request and a clipboard
        # text made of key events, then a pointer event split over two messages.
        clipboard = KEY_DOWN * 4
        connection.send(
            KEY_DOWN
            + struct.pack(">BBHHHH", 3, 1, 0, 0, 64, 64)
            + POINTER * 2
            + struct.pack(">B3xI", 6, len(clipboard))
            + clipboard
            + KEY_UP
            + POINTER[:3]
        )
        connection.send(POINTER[3:])
        wait_for(lambda: activity().input_events >= 5, FLUSH_WAIT_S, "the counted input")  # type: ignore[union-attr]
        row = activity()
        assert row is not None and row.input_events == 5 and row.last_input_at is not None
        assert rfb.frame() == 0  # the desktop still answers: the bytes went through
        connection.send(POINTER)  # counted at the close at the latest

        stopped = time.monotonic()
        stop = browser.post(
            f"/api/v1/sessions/{session_id}/stop/",
            headers={"X-CSRFToken": browser.cookies["csrftoken"]},
        )
        assert stop.status_code in (200, 202), stop.text
        assert closed_with(connection, stopped, "desktop stopped") == CLOSE_SESSION_ENDED
    wait_for(lambda: activity().viewers == 0, FLUSH_WAIT_S, "the viewer gone")  # type: ignore[union-attr]
    wait_for(lambda: activity().input_events == 6, FLUSH_WAIT_S, "the last event")  # type: ignore[union-attr]


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
