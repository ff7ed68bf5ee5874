"""The agent protocol's part for the desktop gateway (issue 34): the data plane's wire. No Django.

The portal decides who may open what and signs a ticket (:mod:`nodeagent.gateway.tickets`);
the node's gateway checks it offline with a key it received in its desired state, logs in to
the desktop itself and carries the bytes. What travels between the portal and the agent:

``DesiredState.gateway`` (:class:`GatewayAccess`)
    The node's ticket keys (the current one and, during a rotation, the one before), and the
    page origins a browser may open the gateway from.
``DesiredSession.revoked_tickets``
    Tickets of this session whose holder lost the right (signed out, disabled, no longer
    allowed): the gateway refuses them and closes what they opened. A session that leaves
    the desired state closes everything opened for it.
``Registration.gateway_port``
    Where the node's gateway listens, on the node's management address.
``POST gateway-events/`` :class:`GatewayEventBatch` -> :class:`GatewayEventsAnswer`
    What the gateway opened and closed, and the keyboard and mouse events it counted (never
    their content): the portal writes the audit rows and the idle detection's inputs.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import Field

from .wire_types import AgentMessage, Count, PortalMessage, Reason, SessionId

# What a ticket opens: the screen, the sound, or one file of the home, up or down.
GatewayPurpose = Literal["screen", "sound", "upload", "download"]
GatewayEventKind = Literal["opened", "input", "closed"]  # input: counted events, every few s
# A ticket's id: 128 random bits, base64url without padding.
TICKET_ID_PATTERN = r"^[A-Za-z0-9_-]{22}$"
TicketId = Annotated[str, Field(pattern=TICKET_ID_PATTERN)]
# A key: 256 random bits, base64url without padding.
GATEWAY_KEY_PATTERN = r"^[A-Za-z0-9_-]{43}$"
# At most this many events in one batch.
GATEWAY_EVENTS_MAX = 500
# The reason of a ``closed`` event whose upload or download went through whole.
TRANSFER_DONE = "done"
# At most this many origins (the portal's page origins).
GATEWAY_ORIGINS_MAX = 8


class GatewayKey(PortalMessage):
    """One ticket key of the node: its id (in every ticket) and the key, base64url."""

    kid: int = Field(ge=1, le=2**31 - 1)
    key: str = Field(pattern=GATEWAY_KEY_PATTERN, repr=False)


class GatewayAccess(PortalMessage):
    """What the node's gateway needs to check tickets offline."""

    keys: list[GatewayKey] = Field(
        min_length=1,
        max_length=2,
        description="The key the portal signs with now first; during a rotation the one "
        "before it too, so that tickets signed a moment ago still open.",
    )
    origins: list[Annotated[str, Field(min_length=1, max_length=200)]] = Field(
        max_length=GATEWAY_ORIGINS_MAX,
        description="Page origins (scheme://host[:port]) a browser may open the gateway from.",
    )


class RevokedTicket(PortalMessage):
    """A ticket whose holder lost the right: the gateway refuses it and closes what it opened
    with the close code of ``why`` (:data:`nodeagent.gateway.codes.CLOSE_CODES`)."""

    ticket: TicketId
    why: Literal["signed_out", "forbidden"]


class GatewayEvent(AgentMessage):
    """One thing the gateway did with a ticket."""

    kind: GatewayEventKind
    ticket: TicketId
    session_id: SessionId
    purpose: GatewayPurpose
    at: datetime
    address: str = Field(default="", max_length=100, description="The browser's address.")
    input_events: Count = Field(
        default=0, description="Keyboard and mouse events counted since the last event."
    )
    input_at: datetime | None = Field(default=None, description="When the latest of them was.")
    bytes_in: int = Field(default=0, ge=0, le=2**63 - 1, description="From the browser.")
    bytes_out: int = Field(default=0, ge=0, le=2**63 - 1, description="To the browser.")
    reason: Reason = ""


class GatewayEventBatch(AgentMessage):
    """``POST gateway-events/``: events in the order they happened."""

    events: list[GatewayEvent] = Field(min_length=1, max_length=GATEWAY_EVENTS_MAX)


class GatewayEventsAnswer(PortalMessage):
    recorded: int = Field(ge=0, description="Events the portal recorded (unknown tickets: not).")
