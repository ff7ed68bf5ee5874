"""The agent refuses a DESKPOOL_PUBLISH_ADDRESS the portal would refuse (issue 25): the
address it registers is where browsers reach its gateway (a ticket's URL), so only a hostname
or an IP address, said at start instead of a validation traceback at registration."""

from __future__ import annotations

import pytest

from nodeagent.config import AgentConfig, ConfigError


@pytest.mark.parametrize("address", ["10.20.0.11", "gpu-a01.campus", "fd00:20::11", "localhost"])
def test_a_host_is_a_publish_address(address):
    assert AgentConfig.from_env({"DESKPOOL_PUBLISH_ADDRESS": address}).publish_address == address


@pytest.mark.parametrize(
    "address", ["127.0.0.1:18081/x?", "localhost:18081#", "http://10.0.0.5", "0.0.0.0", "a b"]
)
def test_anything_else_stops_the_agent_with_a_clear_error(address):
    with pytest.raises(ConfigError, match="DESKPOOL_PUBLISH_ADDRESS .*hostname or an IP|node's"):
        AgentConfig.from_env({"DESKPOOL_PUBLISH_ADDRESS": address})
