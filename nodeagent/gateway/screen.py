"""The screen: noVNC's WebSocket to the desktop's websockify, logged in by the gateway.

The gateway does the RFB login with VNC authentication and the session's secret
(:func:`nodeagent.rfb_login.log_in_upstream`), then plays the server's part to the browser
offering security type None (:class:`nodeagent.rfb_login.BrowserHandshake`), and from the
browser's ClientInit on passes binary messages both ways, each at most
:data:`~nodeagent.gateway.carrying.MESSAGE_MAX_BYTES`. Flow control: each pump awaits the
other side's send (which drains), and each side keeps at most
:data:`~nodeagent.gateway.carrying.QUEUE_MESSAGES` unread, after which websockets stops
reading its socket; so a side that stops reading stops the other side's reads.
"""

from __future__ import annotations

import asyncio
import logging

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake

from nodeagent.gateway.carrying import (
    CLOSE_TIMEOUT_S,
    MESSAGE_MAX_BYTES,
    QUEUE_MESSAGES,
    UPSTREAM_TIMEOUT_S,
    first_of,
)
from nodeagent.gateway.codes import CLOSE_TOO_BIG, CLOSE_UNREACHABLE
from nodeagent.gateway.links import CLOSE_NORMAL, CLOSE_UNSUPPORTED, Link, LinkEnded
from nodeagent.rfb_input import InputCounter
from nodeagent.rfb_login import RFB_38, BrowserHandshake, RfbError, log_in_upstream

log = logging.getLogger(__name__)

INPUT_REPORT_S = 5.0  # how often counted input is reported (while there is any)
BROWSER_HANDSHAKE_S = 10.0  # the browser's part of the handshake, at most
CLIENT_INIT_LENGTH = 1  # the browser's first byte past the handshake, not a message
MESSAGE_TOO_BIG = 1009  # what websockets closes with for a message over max_size


async def carry_screen(link: Link) -> None:
    """Log in to the desktop, then to the browser, then pass bytes until a side ends."""
    upstream, pending = await open_desktop(link)
    link.report_opened()
    link.counter = InputCounter(skip=CLIENT_INIT_LENGTH)
    await link.browser.send(RFB_38)
    try:
        rest = await asyncio.wait_for(greet_browser(link, pending), BROWSER_HANDSHAKE_S)
    except TimeoutError as error:
        raise LinkEnded(CLOSE_NORMAL, "the browser did not finish its handshake") from error
    if rest:
        await to_desktop(link, upstream, rest)
    await first_of(
        desktop_to_browser(link, upstream),
        browser_to_desktop(link, upstream),
        report_input_regularly(link),
    )


async def open_desktop(link: Link) -> tuple[ClientConnection, bytes]:
    """The desktop's websockify, logged in; what it sent past its SecurityResult. LinkEnded
    (4502) if it does not answer or refuses."""
    session = link.session
    where = f"{session.host}:{session.port}"
    try:
        upstream = await connect(
            f"ws://{where}/websockify",
            max_size=MESSAGE_MAX_BYTES,
            max_queue=QUEUE_MESSAGES,
            compression=None,
            open_timeout=UPSTREAM_TIMEOUT_S,
            close_timeout=CLOSE_TIMEOUT_S,
        )
    except (OSError, InvalidHandshake, TimeoutError) as error:
        log.warning("session %s: no desktop at %s: %s", session.session_id, where, error)
        raise LinkEnded(CLOSE_UNREACHABLE, "the desktop does not answer") from error
    link.hold(upstream.close)
    try:
        pending = await asyncio.wait_for(
            log_in_upstream(upstream, session.password), UPSTREAM_TIMEOUT_S
        )
    except (ConnectionClosed, TimeoutError, RfbError) as error:
        log.warning("session %s: the desktop's login failed: %s", session.session_id, error)
        raise LinkEnded(CLOSE_UNREACHABLE, "the desktop's login failed") from error
    return upstream, pending


async def greet_browser(link: Link, pending: bytes) -> bytes:
    """The server's part of the handshake to the browser (security type None); then what the
    desktop sent past its login goes to the browser. Returns the browser's bytes past it."""
    handshake = BrowserHandshake()
    while not handshake.done:
        data = await from_browser(link)
        try:
            reply, rest = handshake.feed(data)
        except RfbError as error:
            raise LinkEnded(CLOSE_NORMAL, str(error)) from error
        if reply:
            await to_browser(link, reply)
    if pending:
        await to_browser(link, pending)
    return rest


async def from_browser(link: Link) -> bytes:
    """The browser's next message; LinkEnded when it closes or sends text."""
    try:
        message = await link.browser.recv()
    except ConnectionClosed as closed:
        raise browser_ended(closed) from closed
    if isinstance(message, str):
        raise LinkEnded(CLOSE_UNSUPPORTED, "binary frames only")
    link.bytes_in += len(message)
    return message


async def to_browser(link: Link, data: bytes) -> None:
    try:
        await link.browser.send(data)
    except ConnectionClosed as closed:
        raise LinkEnded(CLOSE_NORMAL, "the browser closed") from closed
    link.bytes_out += len(data)


async def to_desktop(link: Link, upstream: ClientConnection, data: bytes) -> None:
    link.count_input(data)
    try:
        await upstream.send(data)
    except ConnectionClosed as closed:
        raise desktop_ended(closed) from closed


def browser_ended(closed: ConnectionClosed) -> LinkEnded:
    """Why the browser's connection ended (the gateway answers a message over the limit with
    4413 itself: :mod:`nodeagent.gateway.server`)."""
    if closed.sent is not None and closed.sent.code == CLOSE_TOO_BIG:
        return LinkEnded(CLOSE_TOO_BIG, f"the browser sent over {MESSAGE_MAX_BYTES} bytes at once")
    return LinkEnded(CLOSE_NORMAL, "the browser closed")


def desktop_ended(closed: ConnectionClosed) -> LinkEnded:
    """Why the desktop's connection ended, as the browser is told."""
    if closed.sent is not None and closed.sent.code == MESSAGE_TOO_BIG:
        return LinkEnded(CLOSE_TOO_BIG, f"the desktop sent over {MESSAGE_MAX_BYTES} bytes at once")
    return LinkEnded(CLOSE_NORMAL, "the desktop closed")


async def desktop_to_browser(link: Link, upstream: ClientConnection) -> None:
    while True:
        try:
            message = await upstream.recv()
        except ConnectionClosed as closed:
            raise desktop_ended(closed) from closed
        if isinstance(message, str):
            raise LinkEnded(CLOSE_UNSUPPORTED, "the desktop sent text")
        await to_browser(link, message)


async def browser_to_desktop(link: Link, upstream: ClientConnection) -> None:
    while True:
        await to_desktop(link, upstream, await from_browser(link))


async def report_input_regularly(link: Link) -> None:
    while True:
        await asyncio.sleep(INPUT_REPORT_S)
        link.report_input()
