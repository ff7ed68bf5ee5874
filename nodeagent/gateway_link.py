"""The agent and its desktop gateway (issue 34): what the gateway is told, and what it
says, sent on to the portal. No Django.

- :func:`gateway_state`: the node, its ticket keys and origins from the desired state, and
  each desired session whose desktop runs here, with its endpoints and secret;
- :class:`EventForwarder`: the gateway's events to ``POST gateway-events/``, in batches, in
  order, retried while the portal is unreachable;
- :class:`GatewayLink`: both, around the :class:`~nodeagent.gateway.supervisor.GatewaySupervisor`
  (one per node), and the port the portal was last told, so that the agent registers again
  when a restarted gateway listens elsewhere.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Protocol

from nodeagent.gateway.messages import GatewaySession, GatewayState
from nodeagent.portal_client import PortalClient, PortalError, PortalUnavailable, Unauthorized
from nodeagent.protocol import DesiredState
from nodeagent.protocol_gateway import GATEWAY_EVENTS_MAX, GatewayEvent, GatewayEventBatch
from nodeagent.runtime.base import ManagedContainer

logger = logging.getLogger(__name__)

# Events go out at most this long after they came (unless the portal is unreachable): a
# batch waits this long for more after its first event.
GATHER_S = 0.1
# Waits between tries while the portal does not take a batch.
RETRY_FIRST_S = 1.0
RETRY_MAX_S = 10.0


class HomeFolderOf(Protocol):
    """The runtime's ``home_folder``."""

    def __call__(self, home_volume: str, *, create: bool) -> Path | None: ...


class EventSource(Protocol):
    """Where the events wait (the supervisor's bounded queue)."""

    def take(self, limit: int = ..., timeout_s: float | None = ...) -> list[GatewayEvent]: ...

    def pending(self) -> int: ...


class Gateway(EventSource, Protocol):
    """What the agent needs of its gateway (the supervisor, or a fake in tests)."""

    @property
    def port(self) -> int | None: ...

    def start(self) -> int | None: ...

    def update(self, state: GatewayState) -> None: ...

    def close(self) -> None: ...


def gateway_state(
    node_id: int,
    desired: DesiredState,
    running: Mapping[int, ManagedContainer],
    home_dir: Callable[[str], str] = lambda _volume: "",
) -> GatewayState:
    """What the gateway may open now: the desired sessions whose desktop runs here and
    answers on a published port (a simulated one has none, and is left out), each with
    where its home's files are here (``home_dir`` of its home volume; "" for none)."""
    access = desired.gateway
    sessions = []
    for session in desired.sessions:
        container = running.get(session.session_id)
        if container is None or not container.running or container.port is None:
            continue
        sessions.append(
            GatewaySession(
                session_id=session.session_id,
                host=container.host,
                port=container.port,
                audio_port=container.audio_port,
                password=session.vnc_password,
                home_volume=session.home_volume,
                home_dir=home_dir(session.home_volume) if session.home_volume else "",
                revoked=session.revoked_tickets,
            )
        )
    return GatewayState(
        node_id=node_id,
        keys=access.keys if access is not None else [],
        origins=access.origins if access is not None else [],
        sessions=sessions,
    )


class EventForwarder(threading.Thread):
    """Takes the gateway's events and posts them in batches (at most
    :data:`~nodeagent.protocol_gateway.GATEWAY_EVENTS_MAX`), in order. A batch the portal
    cannot take now (unreachable, 5xx, our token refused while the agent registers again)
    is tried again with backoff, the events behind it waiting in the bounded queue; one it
    refuses (another 4xx) is logged and dropped."""

    def __init__(
        self,
        source: EventSource,
        client: PortalClient,
        *,
        gather_s: float = GATHER_S,
        retry_first_s: float = RETRY_FIRST_S,
        retry_max_s: float = RETRY_MAX_S,
    ) -> None:
        super().__init__(name="gateway-events", daemon=True)
        self.source = source
        self.client = client
        self.gather_s = gather_s
        self.retry_first_s = retry_first_s
        self.retry_max_s = retry_max_s
        self.sent = 0  # events the portal took
        self._closing = threading.Event()

    def run(self) -> None:
        batch: list[GatewayEvent] = []
        delay = self.retry_first_s
        while True:
            if not batch:
                if self._closing.is_set() and not self.source.pending():
                    return
                batch = self._gather()
                if not batch:
                    continue
            outcome = self._post(batch)
            if outcome == "retry" and not self._closing.is_set():
                self._closing.wait(delay)
                delay = min(self.retry_max_s, delay * 2)
                continue
            if outcome == "retry":  # closing: no waiting for a portal that is not there
                logger.warning("agent stopping: %d gateway event(s) not sent", len(batch))
                return
            batch = []
            delay = self.retry_first_s

    def close(self, timeout_s: float = 5.0) -> None:
        """Send what is queued (one try) and stop."""
        self._closing.set()
        if self.is_alive():
            self.join(timeout_s)

    def _gather(self) -> list[GatewayEvent]:
        batch = self.source.take(GATEWAY_EVENTS_MAX, timeout_s=0.5)
        if batch and len(batch) < GATEWAY_EVENTS_MAX and not self._closing.is_set():
            self._closing.wait(self.gather_s)
            batch += self.source.take(GATEWAY_EVENTS_MAX - len(batch), timeout_s=0)
        return batch

    def _post(self, batch: list[GatewayEvent]) -> str:
        """``sent``, ``dropped`` or ``retry``."""
        try:
            self.client.gateway_events(GatewayEventBatch(events=batch))
        except (PortalUnavailable, Unauthorized) as error:
            logger.warning("gateway events (%d) wait for the portal: %s", len(batch), error)
            return "retry"
        except PortalError as error:
            logger.error("the portal refused %d gateway event(s), dropped: %s", len(batch), error)
            return "dropped"
        except Exception:
            logger.exception("sending %d gateway event(s) failed; trying again", len(batch))
            return "retry"
        self.sent += len(batch)
        return "sent"


class GatewayLink:
    """The agent's gateway: started before the first registration, fed after each desired
    state is applied, its events forwarded, closed when the agent stops. ``home_folder``:
    where a home volume's files are on this host (the runtime's ``home_folder``), for the
    gateway's uploads and downloads."""

    def __init__(
        self,
        gateway: Gateway,
        client: PortalClient,
        *,
        forwarder: EventForwarder | None = None,
        home_folder: HomeFolderOf | None = None,
    ) -> None:
        self.gateway = gateway
        self.forwarder = forwarder or EventForwarder(gateway, client)
        self.home_folder = home_folder
        # A volume's folder, asked once while its desktop runs here.
        self._home_dirs: dict[str, str] = {}
        self._lock = threading.Lock()
        self._node_id = 0
        self._desired: DesiredState | None = None
        self.registered_port: int | None = None  # what the portal was told last

    def start(self) -> int | None:
        port = self.gateway.start()
        self.forwarder.start()
        return port

    @property
    def port(self) -> int | None:
        return self.gateway.port

    def moved(self) -> bool:
        """True when the gateway listens where the portal was not told (a restart on port
        0 got another one, or the first start failed and a later one worked)."""
        port = self.gateway.port
        return port is not None and port != self.registered_port

    def feed(
        self,
        node_id: int,
        desired: DesiredState | None,
        running: Callable[[], Mapping[int, ManagedContainer]],
    ) -> None:
        """Tell the gateway what it may open now. ``desired`` None: the last one, with the
        desktops ``running`` now (a desktop has just started)."""
        with self._lock:  # one after the other, so that an older picture never wins
            if desired is not None:
                self._desired = desired
                self._node_id = node_id
            if self._desired is None:
                return
            state = gateway_state(self._node_id, self._desired, running(), self._home_dir)
            # Asked again once its desktop is gone: a home carried into a disk-bounded image
            # at its next start lives elsewhere then (nodeagent/runtime/home_volumes.py).
            shown = {s.home_volume for s in state.sessions}
            self._home_dirs = {v: d for v, d in self._home_dirs.items() if v in shown}
            self.gateway.update(state)

    def _home_dir(self, volume: str) -> str:
        if self.home_folder is None:
            return ""
        if volume not in self._home_dirs:
            try:
                folder = self.home_folder(volume, create=False)
            except Exception as error:  # the engine: no files this time, the screen still opens
                logger.warning("where is home volume %s? %s", volume, error)
                return ""
            if folder is None:
                return ""
            self._home_dirs[volume] = str(folder)
        return self._home_dirs[volume]

    def close(self) -> None:
        """End the gateway, then send its last events (one try)."""
        self.gateway.close()
        self.forwarder.close()
