"""What the agent tells its gateway process, and what the gateway tells back. No Django.

The gateway runs as a child of the agent (``python -m nodeagent.gateway``, started and
restarted by :mod:`nodeagent.gateway.supervisor`). They speak JSON lines over the child's
standard input and output, never over a file or the environment, so the desktops' secrets
stay in the two processes' memory:

- agent -> gateway: a :class:`GatewayState` line, whole, each time it changes (and first
  thing after a start): the node, its ticket keys and the page origins, and every desktop
  the gateway may open with its endpoints and secret;
- gateway -> agent: one :class:`~nodeagent.protocol_gateway.GatewayEvent` line per thing
  it opened or closed, which the agent sends on to the portal (``POST gateway-events/``).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from nodeagent.protocol_gateway import GatewayKey, RevokedTicket
from nodeagent.wire_types import Port, SessionId


class GatewaySession(BaseModel):
    """A desktop the gateway may open: where it listens on this node and its secret."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    session_id: SessionId
    host: str = Field(min_length=1, max_length=200)  # the published ports' address
    port: Port  # websockify
    audio_port: Port | None = None  # deskpool-audio; None: the image serves no sound
    password: str = Field(min_length=1, max_length=8, repr=False)
    home_volume: str = Field(default="", max_length=200)
    revoked: list[RevokedTicket] = Field(default_factory=list)


class GatewayState(BaseModel):
    """Everything the gateway needs, whole."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    node_id: int = Field(ge=0)  # 0: not registered yet (nothing opens)
    keys: list[GatewayKey] = Field(default_factory=list)
    origins: list[str] = Field(default_factory=list)
    sessions: list[GatewaySession] = Field(default_factory=list)
