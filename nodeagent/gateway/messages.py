"""What the agent tells its gateway process, and what the gateway tells back. No Django.

The gateway runs as a child of the agent (``python -m nodeagent.gateway``, started and
restarted by :mod:`nodeagent.gateway.supervisor`). They speak JSON lines over the child's
standard input and output, never over a file or the environment, so the desktops' secrets
stay in the two processes' memory:

- agent -> gateway: a :class:`GatewayState` line, whole, each time it changes (and first
  thing after a start): the node, its ticket keys and the page origins, and every desktop
  the gateway may open with its endpoints and secret;
- gateway -> agent: first, once, a :class:`GatewayListening` line, ``{"listening": <port>}``:
  the port it bound (``--port 0`` binds an ephemeral one, so the agent learns it here); then
  one :class:`~nodeagent.protocol_gateway.GatewayEvent` line per thing it opened or closed and
  per batch of counted input, which the agent sends on to the portal (``POST
  gateway-events/``). Nothing else goes to standard output; logs go to standard error.

A state line is at most :data:`STATE_LINE_MAX_BYTES`; the gateway drops a longer one (and a
malformed one) with a log line and keeps the state it had. It exits when its standard input
ends (the agent died) or on SIGTERM.

``python -m nodeagent.gateway --bind ADDR --port PORT [--trusted-proxy CIDR ...]``: the
browser's address in the events is the peer's, or for a peer in a trusted proxy network
(nginx) its ``X-Real-IP`` header.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from nodeagent.protocol_gateway import GatewayKey, RevokedTicket
from nodeagent.wire_types import Port, SessionId

STATE_LINE_MAX_BYTES = 4 * 1024 * 1024  # a longer state line is dropped


class GatewaySession(BaseModel):
    """A desktop the gateway may open: where it listens on this node and its secret."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    session_id: SessionId
    host: str = Field(min_length=1, max_length=200)  # the published ports' address
    port: Port  # websockify
    audio_port: Port | None = None  # deskpool-audio; None: the image serves no sound
    password: str = Field(min_length=1, max_length=8, repr=False)
    home_volume: str = Field(default="", max_length=200)
    # Where the home's files are on this host (the agent's path: a Docker volume's folder or
    # one under DESKPOOL_HOME_ROOT); "" when there is none here. Uploads and downloads.
    home_dir: str = Field(default="", max_length=4096)
    revoked: list[RevokedTicket] = Field(default_factory=list)


class GatewayState(BaseModel):
    """Everything the gateway needs, whole."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    node_id: int = Field(ge=0)  # 0: not registered yet (nothing opens)
    keys: list[GatewayKey] = Field(default_factory=list)
    origins: list[str] = Field(default_factory=list)
    sessions: list[GatewaySession] = Field(default_factory=list)


class GatewayListening(BaseModel):
    """The gateway's first line on standard output: the port it listens on."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    listening: Port
