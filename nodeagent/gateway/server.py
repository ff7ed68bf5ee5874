"""The gateway's listener: paths, the Origin check, ticket intake, and each link's life.

The files paths (``/files/upload``, ``/files/download``) are streaming HTTP, served on the
same port by :mod:`.files` (:class:`GatewayConnection` routes by the request line).

Before the upgrade: an unknown path is answered 404, an Origin that is not exactly one of
the state's origins (or none) 403. After it, the browser's first message must be a text
frame holding its ticket, within :data:`TICKET_WAIT_S`; a ticket refused
(:func:`nodeagent.gateway.tickets.check_ticket`), for a desktop the state does not hold
(4410), revoked (4401, 4403) or over the desktop's cap (4429) closes the socket with its
code, and nothing is opened upstream. A good one becomes a :class:`~.links.Link` in the
:class:`~.registry.Registry` (which ends it on revocation), carried by
:func:`~.screen.carry_screen` or :func:`~.sound.carry_sound`; when it ends, the browser is
closed first, then the desktop, and a ``closed`` event follows its ``opened``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from http import HTTPStatus

from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed
from websockets.frames import CloseCode
from websockets.http11 import Request, Response
from websockets.server import ServerProtocol

from nodeagent.gateway.codes import (
    CLOSE_BUSY,
    CLOSE_TICKET_INVALID,
    CLOSE_TOO_BIG,
    GATEWAY_SCREEN_PATH,
    GATEWAY_SOUND_PATH,
)
from nodeagent.gateway.events import EventWriter
from nodeagent.gateway.files import FilesHandler, is_files_request
from nodeagent.gateway.links import (
    CLOSE_GOING_AWAY,
    CLOSE_INTERNAL,
    Link,
    LinkEnded,
    Network,
    browser_address,
    close_reason,
)
from nodeagent.gateway.registry import Registry
from nodeagent.gateway.screen import carry_screen
from nodeagent.gateway.sound import carry_sound
from nodeagent.gateway.tickets import ReplayMemo, Ticket, TicketRefused, check_ticket

log = logging.getLogger(__name__)

TICKET_WAIT_S = 5.0  # the browser's ticket comes within this after the upgrade
REQUEST_LINE_MAX = 8192  # bytes read to find the request line; then websockets answers
REQUEST_LINE_WAIT_S = 10.0  # for it
WAITING_MAX = 1024  # sockets upgraded and still without a ticket, at most
Carrier = Callable[[Link], Awaitable[None]]
ROUTES: dict[str, tuple[str, Carrier]] = {
    GATEWAY_SCREEN_PATH: ("screen", carry_screen),
    GATEWAY_SOUND_PATH: ("sound", carry_sound),
}


class TooBigIs4413(ServerProtocol):
    """websockets closes a message over ``max_size`` with 1009; the page knows 4413."""

    def fail(self, code: CloseCode | int, reason: str = "") -> None:
        super().fail(CLOSE_TOO_BIG if code == CloseCode.MESSAGE_TOO_BIG else code, reason)


class GatewayConnection(ServerConnection):
    """A browser's connection (see :class:`TooBigIs4413`).

    With a :class:`~.files.FilesHandler` (:func:`connection_class`), it first reads the
    request line itself: a files path's connection goes to the handler (streaming HTTP,
    which websockets cannot do), any other to websockets as it came, so that the screen,
    the sound and the files share the gateway's one port (and nginx's one route)."""

    files: FilesHandler | None = None

    def __init__(self, protocol: ServerProtocol, *args: object, **kwargs: object) -> None:
        # serve() builds the protocol itself; this is where its class may be chosen.
        protocol.__class__ = TooBigIs4413
        super().__init__(protocol, *args, **kwargs)  # type: ignore[arg-type]
        self.first: bytearray | None = None  # the bytes before the request line is known
        self.early: asyncio.Transport | None = None
        self.waiting: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if self.files is None:
            super().connection_made(transport)
            return
        assert isinstance(transport, asyncio.Transport)
        self.first, self.early = bytearray(), transport
        self.waiting = self.loop.call_later(REQUEST_LINE_WAIT_S, transport.abort)

    def data_received(self, data: bytes) -> None:
        if self.first is None:
            super().data_received(data)
            return
        self.first += data
        end = self.first.find(b"\r\n")
        if end < 0 and len(self.first) < REQUEST_LINE_MAX:
            return
        received, self.first = bytes(self.first), None
        assert self.waiting is not None and self.early is not None
        self.waiting.cancel()
        if self.files is not None and end >= 0 and is_files_request(received[:end]):
            self.files.take(self.early, received)
            return
        super().connection_made(self.early)
        super().data_received(received)

    def eof_received(self) -> None:
        if self.first is None:  # else: closed before its request line; the transport closes
            super().eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.first is not None:
            if self.waiting is not None:
                self.waiting.cancel()
            return  # websockets never saw it
        super().connection_lost(exc)


def connection_class(files: FilesHandler) -> type[GatewayConnection]:
    """A :class:`GatewayConnection` that hands the files paths to ``files``."""
    return type("FilesAndSockets", (GatewayConnection,), {"files": files})


def path_of(request: Request) -> str:
    return request.path.partition("?")[0]


class Gateway:
    """The listener's two callbacks: :meth:`process_request` and :meth:`handle`."""

    def __init__(
        self, registry: Registry, events: EventWriter, trusted_proxies: Sequence[Network] = ()
    ) -> None:
        self.registry = registry
        self.events = events
        self.trusted_proxies = tuple(trusted_proxies)
        self.memo = ReplayMemo()  # one per process: a ticket opens once on this node
        self.waiting = 0  # upgraded sockets whose ticket has not come yet

    def process_request(self, connection: ServerConnection, request: Request) -> Response | None:
        """404 for an unknown path, 403 for a foreign or missing Origin; else upgrade."""
        if path_of(request) not in ROUTES:
            return connection.respond(HTTPStatus.NOT_FOUND, "Not found\n")
        origin = request.headers.get("Origin")
        if origin is None or origin not in self.registry.state.origins:
            log.info("refused a socket from origin %r", (origin or "")[:100])
            return connection.respond(HTTPStatus.FORBIDDEN, "Forbidden origin\n")
        return None

    async def handle(self, browser: ServerConnection) -> None:
        """One browser socket, from its ticket to its close."""
        assert browser.request is not None  # process_request saw it
        purpose, carry = ROUTES[path_of(browser.request)]
        try:
            ticket = await self.take_ticket(browser, purpose)
            link = self.registry.admit(ticket, browser, self.address_of(browser), self.events)
        except LinkEnded as refused:
            log.info("refused a %s socket: %s (%d)", purpose, refused.args[0], refused.code)
            await browser.close(refused.code, close_reason(refused.args[0]))
            return
        await self.carry(link, carry)

    async def take_ticket(self, browser: ServerConnection, purpose: str) -> Ticket:
        """The browser's first message, checked as a ticket for ``purpose``; else LinkEnded."""
        if self.waiting >= WAITING_MAX:
            raise LinkEnded(CLOSE_BUSY, "too many sockets wait for their ticket")
        self.waiting += 1
        try:
            async with asyncio.timeout(TICKET_WAIT_S):
                text = await browser.recv()
        except TimeoutError as error:
            raise LinkEnded(CLOSE_TICKET_INVALID, "no ticket came") from error
        except ConnectionClosed as closed:
            raise LinkEnded(CLOSE_TICKET_INVALID, "closed before its ticket") from closed
        finally:
            self.waiting -= 1
        if not isinstance(text, str):
            raise LinkEnded(CLOSE_TICKET_INVALID, "the ticket comes as a text frame")
        state = self.registry.state
        try:
            return check_ticket(
                text,
                keys=self.registry.keys,
                node_id=state.node_id,
                purpose=purpose,
                memo=self.memo,
            )
        except TicketRefused as refused:
            raise LinkEnded(refused.code, str(refused)) from refused

    def address_of(self, browser: ServerConnection) -> str:
        """The browser's address: the peer's, or behind a trusted proxy its X-Real-IP."""
        peer = str(browser.remote_address[0]) if browser.remote_address else ""
        real = browser.request.headers.get("X-Real-IP") if browser.request else None
        return browser_address(peer, real, self.trusted_proxies)

    async def carry(self, link: Link, carry: Carrier) -> None:
        """Carry the link until it ends; then close the browser, its desktop, and report."""
        link.task = asyncio.create_task(carry(link))  # type: ignore[arg-type]
        try:
            await link.task
        except LinkEnded as ended:
            link.finish(ended.code, ended.args[0])
        except asyncio.CancelledError:
            if link.code is None:  # the gateway itself stops, not a revocation
                link.finish(CLOSE_GOING_AWAY, "the gateway stops")
                raise
        except Exception:
            log.exception("session %s: the %s link failed", link.ticket.sid, link.purpose)
            link.finish(CLOSE_INTERNAL, "the gateway failed")
        finally:
            self.registry.remove(link)
            await link.close()
            if link.opened:
                link.report_closed()
            log.info(
                "session %s: %s closed (%s: %s)", link.ticket.sid, link.purpose, link.code, link.why
            )
