"""One open browser connection of the gateway (a link): what it opened, its counts, its end."""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from websockets.asyncio.server import ServerConnection

from nodeagent.gateway.events import EventWriter
from nodeagent.gateway.messages import GatewaySession
from nodeagent.gateway.tickets import Ticket
from nodeagent.protocol_gateway import GatewayEvent, GatewayEventKind
from nodeagent.rfb_input import InputCounter
from nodeagent.wire_types import cut_reason

log = logging.getLogger(__name__)

Network = ipaddress.IPv4Network | ipaddress.IPv6Network

CLOSE_NORMAL = 1000
CLOSE_GOING_AWAY = 1001  # the gateway stops: the page may retry (through a new ticket)
CLOSE_UNSUPPORTED = 1003  # a text frame where only binary ones go
CLOSE_INTERNAL = 1011  # a fault of the gateway's own
REASON_MAX_BYTES = 123  # what a close frame carries


class LinkEnded(Exception):
    """The link ends (or is refused) with this close code; the message says why, for the log
    and the close frame (no secret in it)."""

    def __init__(self, code: int, why: str) -> None:
        super().__init__(why)
        self.code = code


def close_reason(text: str) -> str:
    """``text`` cut to what a close frame carries."""
    return text.encode()[:REASON_MAX_BYTES].decode(errors="ignore")


@dataclass(eq=False)
class Link:
    """A browser connection that presented a good ticket, until it closes."""

    ticket: Ticket
    session: GatewaySession  # as the state had it when the link was admitted
    address: str  # the browser's
    browser: ServerConnection
    events: EventWriter
    task: asyncio.Task[None] | None = None  # what carries its bytes
    code: int | None = None  # why it ends, once known
    why: str = ""
    opened: bool = False
    bytes_in: int = 0  # from the browser
    bytes_out: int = 0  # to the browser
    counter: InputCounter | None = None  # the screen's keyboard and mouse events
    input_at: float = 0.0  # time.time() of the latest counted event
    upstreams: list[Callable[[], Awaitable[None]]] = field(default_factory=list)

    @property
    def purpose(self) -> str:
        return self.ticket.pur

    def finish(self, code: int, why: str) -> None:
        """Remember why the link ends (the first reason wins)."""
        if self.code is None:
            self.code, self.why = code, why

    def end(self, code: int, why: str) -> None:
        """End the link now (revocation): its carrier stops, the browser and upstream close."""
        self.finish(code, why)
        if self.task is not None:
            self.task.cancel()

    def hold(self, close: Callable[[], Awaitable[None]]) -> None:
        """Close this upstream when the link ends (after the browser)."""
        self.upstreams.append(close)

    async def close(self) -> None:
        """Close the browser with the link's code, then its upstreams."""
        code = self.code if self.code is not None else CLOSE_NORMAL
        await self.browser.close(code, close_reason(self.why))
        for close in self.upstreams:
            try:
                await close()
            except Exception:  # the link is over either way; one close must not skip the rest
                log.exception("closing an upstream of session %s", self.session.session_id)
        self.upstreams.clear()

    def count_input(self, data: bytes) -> None:
        if self.counter is not None and self.counter.feed(data):
            self.input_at = time.time()

    def report_opened(self) -> None:
        self.opened = True
        self._report("opened", address=self.address)

    def report_input(self) -> None:
        """An ``input`` event with the events counted since the last, if any."""
        events = self.counter.take() if self.counter is not None else 0
        if events:
            self._report("input", input_events=events, input_at=self._input_at())

    def report_closed(self) -> None:
        events = self.counter.take() if self.counter is not None else 0
        self._report(
            "closed",
            input_events=events,
            input_at=self._input_at() if events else None,
            bytes_in=self.bytes_in,
            bytes_out=self.bytes_out,
            reason=cut_reason(f"{self.code}: {self.why}" if self.code else self.why),
        )

    def _input_at(self) -> datetime:
        return datetime.fromtimestamp(self.input_at, tz=UTC)

    def _report(self, kind: GatewayEventKind, **fields: object) -> None:
        self.events.emit(gateway_event(self.ticket, kind, **fields))


def gateway_event(ticket: Ticket, kind: GatewayEventKind, **fields: object) -> GatewayEvent:
    """An event about what ``ticket`` opened, now."""
    return GatewayEvent(
        kind=kind,
        ticket=ticket.jti,
        session_id=ticket.sid,
        purpose=ticket.pur,  # type: ignore[arg-type]  # checked: one of PURPOSES
        at=datetime.now(tz=UTC),
        **fields,  # type: ignore[arg-type]
    )


def browser_address(peer: str, real_ip: str | None, trusted: Sequence[Network]) -> str:
    """The browser's address: the peer's, or behind a trusted proxy its X-Real-IP."""
    try:
        from_proxy = any(ipaddress.ip_address(peer) in net for net in trusted)
    except ValueError:
        return peer[:100]
    if from_proxy and real_ip:
        try:
            return str(ipaddress.ip_address(real_ip.strip()))
        except ValueError:
            log.warning("a trusted proxy sent X-Real-IP %r", real_ip[:100])
    return peer
