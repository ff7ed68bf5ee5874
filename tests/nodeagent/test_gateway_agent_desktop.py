"""The whole node with real parts: the agent (DockerRuntime, deskpool/tiny) starts the real
gateway, feeds it the desktop it started, and sends its events on; a browser logs in to the
desktop with a ticket, and a ticket revoked in the desired state closes its screen in 2 s."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import httpx
import pytest

from nodeagent.agent import Agent
from nodeagent.config import AgentConfig
from nodeagent.gateway.codes import CLOSE_SIGNED_OUT
from nodeagent.gateway.supervisor import GatewaySupervisor
from nodeagent.gateway_link import GatewayLink
from nodeagent.portal_client import PortalClient
from nodeagent.probe.simulated import SimulatedProbe, load_fleet
from nodeagent.protocol import to_wire
from nodeagent.runtime.docker_runtime import DockerRuntime
from tests.nodeagent.conftest import desired_session
from tests.nodeagent.gateway.browser import closed_with, log_in_screen, open_socket, pointer_events
from tests.nodeagent.gateway.gateway_process import ORIGIN, new_key, ticket_for
from tests.nodeagent.test_agent_loop import DEMO_FLEET
from tests.nodeagent.test_gateway_link import GatewayPortal, eventually

pytestmark = pytest.mark.docker

SESSION_ID = 4401
REVOKED_WITHIN_S = 2.0  # the bound on revocation


def test_the_agent_feeds_the_real_gateway_which_opens_its_desktop_and_reports_it(  # type: ignore[no-untyped-def]
    docker_client, tiny_image, node_name, sessions_dir, tmp_path: Path
) -> None:
    key, key_bytes = new_key()
    wanted = desired_session(SESSION_ID, image=tiny_image)
    portal = GatewayPortal(desired=[to_wire(wanted)])
    portal.access = {"keys": [to_wire(key)], "origins": [ORIGIN]}
    client = PortalClient("http://portal.test", transport=httpx.MockTransport(portal))
    config = AgentConfig(
        node_name=node_name, state_dir=tmp_path, join_token="join-1", poll_interval_s=0.2
    )
    runtime = DockerRuntime(
        docker_client, node_name=node_name, sessions_dir=sessions_dir, ready_timeout_s=60
    )
    supervisor = GatewaySupervisor("127.0.0.1", 0)
    gateway = GatewayLink(supervisor, client)
    agent = Agent(
        config,
        client=client,
        probe=SimulatedProbe(load_fleet(DEMO_FLEET).node("gpu-a01")),
        runtime=runtime,
        gateway=gateway,
    )
    loop = threading.Thread(target=agent.run, daemon=True)
    loop.start()
    try:
        eventually(lambda: SESSION_ID in agent.reconciler.running_desktops(), timeout_s=90)
        port = gateway.port
        assert port is not None
        assert portal.bodies("register/")[0]["gateway_port"] == port
        url = f"ws://127.0.0.1:{port}/screen"
        text, ticket = ticket_for(key_bytes, SESSION_ID)

        async def view() -> tuple[int, int]:
            async with await open_socket(url) as browser:
                await browser.send(text)
                size = await log_in_screen(browser)
                await pointer_events(browser, 3)
                return size

        width, height = asyncio.run(view())
        assert width > 0 and height > 0  # the desktop's ServerInit: logged in for real
        eventually(lambda: [e["kind"] for e in portal.events][-1:] == ["closed"])
        assert {e["ticket"] for e in portal.events} == {ticket.jti}
        assert [e["kind"] for e in portal.events][0] == "opened"

        # A second viewer whose holder signs out: the next desired state closes it.
        text_2, ticket_2 = ticket_for(key_bytes, SESSION_ID)

        async def revoked_while_viewing() -> tuple[int | None, float]:
            async with await open_socket(url) as browser:
                await browser.send(text_2)
                await log_in_screen(browser)
                revoked = {"ticket": ticket_2.jti, "why": "signed_out"}
                portal.desired = [{**to_wire(wanted), "revoked_tickets": [revoked]}]
                began = time.monotonic()
                code = await closed_with(browser, within=10)
                return code, time.monotonic() - began

        code, took_s = asyncio.run(revoked_while_viewing())
        assert code == CLOSE_SIGNED_OUT
        assert took_s < REVOKED_WITHIN_S
    finally:
        agent.stopping.set()
        loop.join(30)
        runtime.stop(SESSION_ID)
    assert supervisor.pid is None  # the gateway ended with the agent
