"""The portal's installation id: made once, handed to every agent at registration, and
taken up by the agent's runtime (issue 25, item 10)."""

from __future__ import annotations

import re

import httpx
import pytest
from rest_framework.test import APIClient

from nodeagent.agent import Agent
from nodeagent.config import AgentConfig
from nodeagent.portal_client import PortalClient
from nodeagent.probe.simulated import SimulatedProbe, load_fleet
from scheduling.models import PoolPolicy
from scheduling.models.sessions import home_volume_of
from scheduling.services.installation import forget_installation_id, installation_id
from scheduling.services.nodes import do_create_join_token
from tests.nodeagent.test_agent_loop import DEMO_FLEET, REGISTERED

from ..conftest import gpu_inventory, registration

pytestmark = pytest.mark.django_db


def test_the_id_is_made_once_and_kept():
    first = installation_id()
    assert re.fullmatch(r"[0-9a-f]{12}", first)
    assert installation_id() == first
    assert PoolPolicy.current().installation_id == first


def test_homes_carry_it_without_a_query_each(owner, django_assert_num_queries):
    """Every desired session names its home: the id is read once per process."""
    assert home_volume_of(owner) == f"deskpool-{installation_id()}-home-ada"
    with django_assert_num_queries(0):
        assert home_volume_of(owner) == f"deskpool-{installation_id()}-home-ada"
    # Another database (a test's, a restored one) is read again once told.
    forget_installation_id()
    PoolPolicy.objects.update(installation_id="cccc55556666")
    assert home_volume_of(owner) == "deskpool-cccc55556666-home-ada"


def test_every_registration_answer_carries_it():
    body = registration("gpu-x", [gpu_inventory("GPU-x", 0, shares=2)])
    body["join_token"] = do_create_join_token("gpu-x", actor="test")
    first = APIClient().post("/api/agent/v1/register/", body, format="json")
    assert first.status_code == 201, first.content
    body.pop("join_token")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Node " + first.json()["node_token"])
    again = client.post("/api/agent/v1/register/", body, format="json")
    assert first.json()["installation_id"] == again.json()["installation_id"] == installation_id()


class _Runtime:
    """A runtime that records the installation id it is given."""

    kind = "docker"

    def __init__(self) -> None:
        self.installation = None

    def use_installation(self, installation: str) -> None:
        self.installation = installation


def test_the_agent_hands_the_id_to_its_runtime(tmp_path):
    def portal(request: httpx.Request) -> httpx.Response:
        answer = {**REGISTERED, "node_token": "t", "installation_id": "abc123def456"}
        return httpx.Response(201, json=answer)

    runtime = _Runtime()
    agent = Agent(
        AgentConfig(node_name="gpu-a01", state_dir=tmp_path, join_token="join-1"),
        client=PortalClient("http://portal.test", transport=httpx.MockTransport(portal)),
        probe=SimulatedProbe(load_fleet(DEMO_FLEET).node("gpu-a01")),
        runtime=runtime,  # type: ignore[arg-type]
    )
    agent.register()
    assert runtime.installation == "abc123def456"
