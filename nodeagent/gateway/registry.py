"""The gateway's state (from the agent) and its open links, and revocation between them."""

from __future__ import annotations

import logging
from typing import Protocol

from websockets.asyncio.server import ServerConnection

from nodeagent.gateway.codes import CLOSE_BUSY, CLOSE_CODES, CLOSE_SESSION_ENDED
from nodeagent.gateway.events import EventWriter
from nodeagent.gateway.links import Link, LinkEnded
from nodeagent.gateway.messages import GatewaySession, GatewayState
from nodeagent.gateway.tickets import Ticket, key_bytes

log = logging.getLogger(__name__)

# Open links per session and purpose, at most (a viewer in a few tabs, not a crowd).
LINKS_PER_SESSION = {"screen": 8, "sound": 4, "upload": 4, "download": 8}


class Held(Protocol):
    """What the registry holds and revokes: a :class:`~.links.Link`, or a file transfer
    (:class:`~.files.Transfer`)."""

    ticket: Ticket

    @property
    def purpose(self) -> str: ...

    def end(self, code: int, why: str) -> None: ...


class Registry:
    """What the agent last said, and every link the gateway carries, by session."""

    def __init__(self) -> None:
        self.state = GatewayState(node_id=0)  # until the agent speaks: nothing opens
        self.keys: dict[int, bytes] = {}
        self.sessions: dict[int, GatewaySession] = {}
        self.links: dict[int, set[Held]] = {}

    def apply(self, state: GatewayState) -> None:
        """Take a new state and, in this same call, end every link it no longer allows."""
        self.state = state
        self.keys = {key.kid: key_bytes(key.key) for key in state.keys}
        self.sessions = {session.session_id: session for session in state.sessions}
        for links in list(self.links.values()):
            for link in list(links):
                if (refusal := self.refusal(link.ticket)) is not None:
                    log.info(
                        "session %s: %s closed (%s)",
                        link.ticket.sid,
                        link.purpose,
                        refusal.args[0],
                    )
                    link.end(refusal.code, refusal.args[0])

    def refusal(self, ticket: Ticket) -> LinkEnded | None:
        """Why the state does not (or no longer) allow what the ticket opens; None if it does."""
        session = self.sessions.get(ticket.sid)
        if session is None:
            return LinkEnded(CLOSE_SESSION_ENDED, "the desktop has ended")
        for revoked in session.revoked:
            if revoked.ticket == ticket.jti:
                return LinkEnded(
                    CLOSE_CODES[revoked.why], f"the ticket was revoked ({revoked.why})"
                )
        return None

    def admit(
        self, ticket: Ticket, browser: ServerConnection, address: str, events: EventWriter
    ) -> Link:
        """A link for a checked ticket; LinkEnded if the state refuses it or its desktop has
        as many links of the kind as it may."""
        link = Link(ticket, self.room_for(ticket), address, browser, events)
        self.hold(link)
        return link

    def room_for(self, ticket: Ticket) -> GatewaySession:
        """The ticket's desktop, as the state has it now; LinkEnded if the state refuses the
        ticket or its desktop has as many links of the kind as it may."""
        if (refusal := self.refusal(ticket)) is not None:
            raise refusal
        links = self.links.get(ticket.sid, set())
        cap = LINKS_PER_SESSION.get(ticket.pur, 0)
        if sum(1 for link in links if link.purpose == ticket.pur) >= cap:
            raise LinkEnded(CLOSE_BUSY, f"this desktop has {cap} {ticket.pur} connections open")
        return self.sessions[ticket.sid]

    def hold(self, link: Held) -> None:
        """Hold ``link`` (after :meth:`room_for`, in the same step) until :meth:`remove`."""
        self.links.setdefault(link.ticket.sid, set()).add(link)

    def remove(self, link: Held) -> None:
        links = self.links.get(link.ticket.sid)
        if links is not None:
            links.discard(link)
            if not links:
                del self.links[link.ticket.sid]

    def count(self) -> int:
        return sum(len(links) for links in self.links.values())
