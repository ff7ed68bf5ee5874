"""The agent and its gateway (nodeagent.gateway_link): the port at registration, the state
built from the desired state and the running desktops, and the events sent on in order."""

from __future__ import annotations

import base64
import json
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from nodeagent.__main__ import gateway_for
from nodeagent.agent import Agent
from nodeagent.config import AgentConfig, ConfigError
from nodeagent.gateway.messages import GatewayState
from nodeagent.gateway.supervisor import GatewaySupervisor
from nodeagent.gateway_link import EventForwarder, GatewayLink, gateway_state
from nodeagent.portal_client import PortalClient
from nodeagent.protocol import DesiredSession, DesiredState, DesiredWarm
from nodeagent.protocol_gateway import GATEWAY_EVENTS_MAX, GatewayEvent
from nodeagent.runtime.base import ManagedContainer, WarmContainer
from nodeagent.runtime.simulated_runtime import SimulatedRuntime
from tests.nodeagent.test_agent_loop import TinyPortal, make_agent

KEY = base64.urlsafe_b64encode(b"k" * 32).rstrip(b"=").decode()
ACCESS = {"keys": [{"kid": 3, "key": KEY}], "origins": ["https://deskpool.example"]}
REVOKED = {"ticket": "A" * 22, "why": "signed_out"}


def desired_session(session_id: int, **fields: Any) -> dict[str, Any]:
    return {
        "session_id": session_id, "user": f"user{session_id}", "course": "",
        "image": "deskpool/tiny:latest", "cpus": 1, "memory_mb": 512, "pids_limit": 256,
        "shm_mb": 64, "gpu_devices": [], "vnc_password": f"pw{session_id}",
        "home_volume": f"home-{session_id}", "placement": f"p{session_id}", **fields,
    }  # fmt: skip


def desired_warm(key: str) -> dict[str, Any]:
    return {
        "key": key, "booking": 1, "course": "", "image": "deskpool/tiny:latest", "cpus": 1,
        "memory_mb": 512, "pids_limit": 256, "shm_mb": 64, "gpu_devices": [],
    }  # fmt: skip


def event(number: int) -> GatewayEvent:
    return GatewayEvent(
        kind="opened",
        ticket=f"{number:022d}",
        session_id=21,
        purpose="screen",
        at=datetime(2025, 1, 1, tzinfo=UTC),
    )


def eventually(check: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "not within the time"
        time.sleep(0.02)


class PortedRuntime(SimulatedRuntime):
    """The SIMULATED runtime, but its desktops say where they answer, as Docker's do: the
    websockify port 20000 + session (warm desktops 30000 + n) and sound 1000 above it."""

    def start(self, session: DesiredSession) -> ManagedContainer:
        container = super().start(session)
        port = 20000 + session.session_id
        return self._keep(replace(container, port=port, audio_port=port + 1000, simulated=False))

    def start_warm(self, warm: DesiredWarm) -> WarmContainer:
        container = replace(super().start_warm(warm), port=30000 + len(self._warm))
        with self._lock:
            self._warm[warm.key] = container
        return container

    def claim(self, key: str, session: DesiredSession) -> ManagedContainer:
        port = self._warm[key].port
        container = super().claim(key, session)
        return self._keep(replace(container, port=port, audio_port=None, simulated=False))

    def _keep(self, container: ManagedContainer) -> ManagedContainer:
        with self._lock:
            self._containers[container.session_id] = container
        return container


class FakeGateway:
    """A gateway that listens nowhere: it keeps the states it got, and hands out events."""

    def __init__(self, port: int | None = 40123) -> None:
        self.port = port
        self.states: list[GatewayState] = []
        self.events: deque[GatewayEvent] = deque()
        self.started = self.closed = False

    def start(self) -> int | None:
        self.started = True
        return self.port

    def update(self, state: GatewayState) -> None:
        if not self.states or self.states[-1] != state:
            self.states.append(state)

    def take(self, limit: int = GATEWAY_EVENTS_MAX, timeout_s: float | None = None) -> list[Any]:
        if not self.events:
            time.sleep(min(timeout_s or 0, 0.05))
        return [self.events.popleft() for _ in range(min(limit, len(self.events)))]

    def pending(self) -> int:
        return len(self.events)

    def close(self) -> None:
        self.closed = True


class GatewayPortal(TinyPortal):
    """The tiny portal with the desired state's gateway part, warm desktops and
    ``gateway-events/`` (answering with ``event_answers`` first, then 200)."""

    def __init__(self, desired: list[dict[str, Any]] | None = None) -> None:
        super().__init__(desired)
        self.warm: list[dict[str, Any]] = []
        self.access: dict[str, Any] = ACCESS
        self.event_answers: list[int] = []
        self.event_batches: list[list[str]] = []  # the tickets of each batch the portal took
        self.events: list[dict[str, Any]] = []  # the events it took, in order

    def __call__(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path.removeprefix("/api/agent/v1/")
        if path == "desired/" and request.headers.get("Authorization") == "Node node-secret":
            self.requests.append((request.method, path, None, None))
            body = {"sessions": self.desired, "warm": self.warm, "gateway": self.access}
            return httpx.Response(200, json=body)
        if path == "gateway-events/":
            status = self.event_answers.pop(0) if self.event_answers else 200
            if status != 200:
                return httpx.Response(status, json={"detail": "no"})
            events = json.loads(request.content)["events"]
            tickets = [e["ticket"] for e in events]
            self.events += events
            self.event_batches.append(tickets)
            return httpx.Response(200, json={"recorded": len(tickets)})
        return super().__call__(request)


def linked_agent(
    portal: GatewayPortal, tmp_path: Path, gateway: FakeGateway
) -> tuple[Agent, GatewayLink]:
    agent = make_agent(portal, tmp_path, poll_interval_s=0.05)
    agent.runtime = PortedRuntime(node_name="gpu-a01", start_delay_s=0.0)
    link = GatewayLink(gateway, agent.client)
    fresh = Agent(
        agent.config, client=agent.client, probe=agent.probe, runtime=agent.runtime, gateway=link
    )
    return fresh, link


@pytest.fixture
def running() -> Iterator[Callable[[Agent], None]]:
    """Runs agents in a thread the way ``python -m nodeagent`` does; stops them after."""
    loops: list[tuple[Agent, threading.Thread]] = []

    def run(agent: Agent) -> None:
        loop = threading.Thread(target=agent.run, daemon=True)
        loop.start()
        loops.append((agent, loop))

    yield run
    for agent, loop in loops:
        agent.stopping.set()
        loop.join(10)


# -- the state -------------------------------------------------------------------------------


def test_the_state_holds_desired_sessions_running_here_with_their_endpoints_and_secret() -> None:
    desired = DesiredState.model_validate({
        "sessions": [
            desired_session(21, revoked_tickets=[REVOKED]),
            desired_session(22),  # not running yet
            desired_session(23),  # SIMULATED: no port
        ],
        "gateway": ACCESS,
    })  # fmt: skip

    def container(session_id: int, port: int | None, audio: int | None) -> ManagedContainer:
        return ManagedContainer(
            session_id=session_id, container_id=f"c{session_id}", running=True,
            status="running", host="10.0.0.5", port=port, audio_port=audio,
        )  # fmt: skip

    running = {
        21: container(21, 32768, 32769),
        23: container(23, None, None),
        24: container(24, 32770, None),  # no longer desired: stopping
    }

    state = gateway_state(7, desired, running)

    assert state.node_id == 7
    assert [k.kid for k in state.keys] == [3] and state.origins == ["https://deskpool.example"]
    [session] = state.sessions
    assert (session.session_id, session.host, session.port, session.audio_port) == (
        21, "10.0.0.5", 32768, 32769,
    )  # fmt: skip
    assert (session.password, session.home_volume) == ("pw21", "home-21")
    assert [r.ticket for r in session.revoked] == ["A" * 22]


def test_without_the_portals_gateway_part_the_state_has_no_keys() -> None:
    desired = DesiredState.model_validate({"sessions": []})
    state = gateway_state(0, desired, {})
    assert (state.keys, state.origins, state.sessions) == ([], [], [])


# -- the agent -------------------------------------------------------------------------------


def test_the_registration_says_where_the_gateway_listens(tmp_path: Path) -> None:
    portal = GatewayPortal()
    with_gateway, _ = linked_agent(portal, tmp_path, FakeGateway(port=40123))
    with_gateway.register()
    make_agent(portal, tmp_path / "other").register()

    first, second = portal.bodies("register/")
    assert first["gateway_port"] == 40123
    assert "gateway_port" not in second  # no gateway: as an older agent


def test_the_agent_feeds_its_gateway_running_desktops_revocations_and_stops(
    tmp_path: Path, running: Callable[[Agent], None]
) -> None:
    portal = GatewayPortal(desired=[desired_session(21), desired_session(22)])
    gateway = FakeGateway()
    agent, _ = linked_agent(portal, tmp_path, gateway)

    running(agent)

    eventually(lambda: bool(portal.bodies("register/")))
    assert gateway.started  # before the registration, which carried its port
    assert portal.bodies("register/")[0]["gateway_port"] == 40123

    def last() -> GatewayState | None:
        return gateway.states[-1] if gateway.states else None

    eventually(lambda: (s := last()) is not None and len(s.sessions) == 2)
    state = last()
    assert state is not None and state.node_id == 7 and [k.kid for k in state.keys] == [3]
    by_id = {s.session_id: s for s in state.sessions}
    assert (by_id[21].port, by_id[21].audio_port, by_id[21].password) == (20021, 21021, "pw21")
    assert by_id[22].home_volume == "home-22"

    # A ticket revoked: the gateway hears of it with the next desired state.
    portal.desired = [desired_session(21, revoked_tickets=[REVOKED]), desired_session(22)]
    eventually(lambda: (s := last()) is not None and bool(s.sessions[0].revoked))
    # A session stopped: it leaves the gateway's state at once.
    portal.desired = [desired_session(22)]
    eventually(lambda: (s := last()) is not None and [x.session_id for x in s.sessions] == [22])

    agent.stopping.set()
    eventually(lambda: gateway.closed)


def test_a_claimed_warm_desktop_counts_with_the_claimed_containers_port(
    tmp_path: Path, running: Callable[[Agent], None]
) -> None:
    portal = GatewayPortal()
    portal.warm = [desired_warm("w1")]
    gateway = FakeGateway()
    agent, _ = linked_agent(portal, tmp_path, gateway)
    running(agent)
    eventually(lambda: [w.key for w in agent.runtime.list_warm()] == ["w1"])
    warm_port = agent.runtime.list_warm()[0].port

    portal.desired = [desired_session(31, warm_key="w1")]

    eventually(lambda: bool(gateway.states) and len(gateway.states[-1].sessions) == 1)
    [session] = gateway.states[-1].sessions
    assert (session.session_id, session.port, session.password) == (31, warm_port, "pw31")
    assert agent.runtime.list_warm() == []  # claimed, not started afresh


def test_a_gateway_back_on_another_port_makes_the_agent_register_again(
    tmp_path: Path, running: Callable[[Agent], None]
) -> None:
    portal = GatewayPortal()
    gateway = FakeGateway(port=40123)
    agent, _ = linked_agent(portal, tmp_path, gateway)
    running(agent)
    eventually(lambda: len(portal.bodies("register/")) == 1)

    gateway.port = 40999  # restarted on port 0: another port

    eventually(lambda: len(portal.bodies("register/")) == 2)
    assert portal.bodies("register/")[1]["gateway_port"] == 40999
    time.sleep(0.3)
    assert len(portal.bodies("register/")) == 2  # once


def test_a_gateway_that_failed_its_first_start_is_registered_once_it_listens(
    tmp_path: Path, running: Callable[[Agent], None]
) -> None:
    portal = GatewayPortal()
    gateway = FakeGateway(port=None)
    agent, _ = linked_agent(portal, tmp_path, gateway)
    running(agent)
    eventually(lambda: len(portal.bodies("register/")) == 1)
    assert "gateway_port" not in portal.bodies("register/")[0]

    gateway.port = 7443

    eventually(lambda: len(portal.bodies("register/")) == 2)
    assert portal.bodies("register/")[1]["gateway_port"] == 7443


# -- the events ------------------------------------------------------------------------------


def forwarder_for(portal: GatewayPortal, source: FakeGateway) -> EventForwarder:
    client = PortalClient(
        "http://portal.test", node_token="node-secret", transport=httpx.MockTransport(portal)
    )
    return EventForwarder(source, client, gather_s=0.05, retry_first_s=0.05, retry_max_s=0.2)


def test_events_go_to_the_portal_in_order_in_batches_of_at_most_500() -> None:
    portal, source = GatewayPortal(), FakeGateway()
    source.events.extend(event(n) for n in range(1200))
    forwarder = forwarder_for(portal, source)

    forwarder.start()
    eventually(lambda: forwarder.sent == 1200)
    forwarder.close()

    assert [len(batch) for batch in portal.event_batches] == [500, 500, 200]
    sent = [ticket for batch in portal.event_batches for ticket in batch]
    assert sent == [f"{n:022d}" for n in range(1200)]


def test_events_wait_while_the_portal_is_unreachable_and_keep_their_order() -> None:
    portal, source = GatewayPortal(), FakeGateway()
    portal.event_answers = [503, 502, 401]  # down, then our token refused for a moment
    source.events.extend(event(n) for n in range(3))
    forwarder = forwarder_for(portal, source)

    forwarder.start()
    time.sleep(0.1)
    source.events.extend(event(n) for n in range(3, 6))  # came while it was down
    eventually(lambda: forwarder.sent == 6)
    forwarder.close()

    assert portal.event_answers == []  # tried until it was answered
    sent = [ticket for batch in portal.event_batches for ticket in batch]
    assert sent == [f"{n:022d}" for n in range(6)]


def test_a_batch_the_portal_refuses_is_dropped_and_the_next_goes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    portal, source = GatewayPortal(), FakeGateway()
    portal.event_answers = [400]
    source.events.extend(event(n) for n in range(2))
    forwarder = forwarder_for(portal, source)
    forwarder.start()
    eventually(lambda: not portal.event_answers)
    time.sleep(0.1)

    source.events.append(event(2))
    eventually(lambda: forwarder.sent == 1)
    forwarder.close()

    assert portal.event_batches == [[f"{2:022d}"]]
    assert any("refused 2 gateway event(s)" in r.getMessage() for r in caplog.records)


def test_closing_sends_what_is_queued() -> None:
    portal, source = GatewayPortal(), FakeGateway()
    forwarder = forwarder_for(portal, source)
    forwarder.start()
    source.events.extend(event(n) for n in range(3))

    forwarder.close()

    assert [t for batch in portal.event_batches for t in batch] == [f"{n:022d}" for n in range(3)]


# -- configuration ---------------------------------------------------------------------------


def test_the_gateway_is_configured_by_the_environment() -> None:
    assert AgentConfig.from_env({}).gateway_port == 0  # any free port: the demo's agents
    assert AgentConfig.from_env({"DESKPOOL_GATEWAY_PORT": "7443"}).gateway_port == 7443
    assert AgentConfig.from_env({"DESKPOOL_GATEWAY": "off"}).gateway_enabled is False
    assert AgentConfig.from_env({"DESKPOOL_GATEWAY": "On"}).gateway_enabled is True
    with pytest.raises(ConfigError, match="DESKPOOL_GATEWAY_PORT"):
        AgentConfig.from_env({"DESKPOOL_GATEWAY_PORT": "70000"})
    with pytest.raises(ConfigError, match="DESKPOOL_GATEWAY_TRUSTED_PROXIES entries"):
        AgentConfig.from_env({"DESKPOOL_GATEWAY_TRUSTED_PROXIES": "nginx"})
    with pytest.raises(ConfigError, match="DESKPOOL_GATEWAY must be on or off"):
        AgentConfig.from_env({"DESKPOOL_GATEWAY": "maybe"})


def test_one_gateway_on_the_management_address_unless_off_or_once() -> None:
    client = PortalClient("http://portal.test")
    config = AgentConfig.from_env({
        "DESKPOOL_PUBLISH_ADDRESS": "10.20.0.11", "DESKPOOL_GATEWAY_PORT": "7443",
        "DESKPOOL_GATEWAY_TRUSTED_PROXIES": "10.20.0.2, 10.20.0.3",
    })  # fmt: skip

    link = gateway_for(config, client, once=False)

    assert link is not None and isinstance(link.gateway, GatewaySupervisor)
    assert link.gateway.command[1:] == [
        "-m", "nodeagent.gateway", "--bind", "10.20.0.11", "--port", "7443",
        "--trusted-proxy", "10.20.0.2/32", "--trusted-proxy", "10.20.0.3/32",
    ]  # fmt: skip
    assert gateway_for(config, client, once=True) is None
    assert gateway_for(replace(config, gateway_enabled=False), client, once=False) is None
