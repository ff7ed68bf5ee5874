"""docker kill a desktop: the session shows LOST with the exit code, its slice is free."""

from __future__ import annotations

import re

import pytest

from nodeagent.protocol import LABEL_USER
from scheduling.services.nodes import do_create_join_token

from ..conftest import TEST_IMAGE
from ..integration.stack import wait_for, write_fleet
from .helpers import (
    api_client,
    open_allocations,
    session_containers,
    submit,
    wait_node_up,
    wait_states,
)

pytestmark = [pytest.mark.faults, pytest.mark.integration, pytest.mark.docker]


def test_killed_container_shows_lost_with_exit_code_and_releases_the_slice(
    stack, owner, profile, docker_engine, require_image, tmp_path
):
    require_image(TEST_IMAGE)
    stack.start_agent(
        do_create_join_token(stack.node, actor="test"),
        write_fleet(tmp_path / "fleet.yaml", stack.node, 2),
    )
    wait_node_up(stack.node)
    client = api_client(stack, owner.username)
    session_id = submit(client, profile)
    wait_states([session_id], "RUNNING", 60)
    [container] = session_containers(stack, docker_engine, session_id)

    container.kill()  # SIGKILL: exit code 137

    def lost():
        body = client.get(f"/api/v1/sessions/{session_id}/").json()
        assert body["state"] in ("RUNNING", "LOST"), body
        return body if body["state"] == "LOST" else None

    body = wait_for(lost, 20, "the session to show LOST")
    assert "exited with code 137" in body["reason"], body
    assert body["desktop_url"] is None
    assert body["ended_at"]
    assert open_allocations(session_id) == 0
    assert body["slice"] is None
    # The dead container goes; the home volume stays.
    wait_for(
        lambda: not session_containers(stack, docker_engine, session_id),
        20,
        "the dead container to be removed",
    )
    homes = docker_engine.volumes.list(filters={"label": f"{LABEL_USER}={owner.username}"})
    names = [home.name for home in homes]
    assert any(re.fullmatch(rf"deskpool-[0-9a-f]{{12}}-home-{owner.username}", n) for n in names)
