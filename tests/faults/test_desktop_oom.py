"""A desktop that runs out of memory: the kernel's OOM killer ends its main process inside
the container's memory cgroup; the user sees LOST with an out-of-memory reason."""

from __future__ import annotations

import pytest

from scheduling.services.nodes import do_create_join_token

from ..conftest import TEST_IMAGE
from ..integration.stack import wait_for, write_fleet
from ..nodeagent.test_oom import MEMORY_HOG, TARGET_MAIN_PROCESS
from .helpers import api_client, open_allocations, session_containers, submit, wait_node_up

pytestmark = [pytest.mark.faults, pytest.mark.integration, pytest.mark.docker]


def test_desktop_killed_by_the_oom_killer_shows_lost_with_an_oom_reason(
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
    wait_for(
        lambda: client.get(f"/api/v1/sessions/{session_id}/").json()["state"] == "RUNNING",
        60,
        "the session to run",
    )
    [container] = session_containers(stack, docker_engine, session_id)

    assert container.exec_run(["sh", "-c", TARGET_MAIN_PROCESS]).exit_code == 0
    container.exec_run(MEMORY_HOG)  # grows to the profile's limit; the main process goes
    container.wait(timeout=30)
    container.reload()
    assert container.attrs["State"]["OOMKilled"] is True
    assert container.attrs["State"]["ExitCode"] == 137

    def lost():
        body = client.get(f"/api/v1/sessions/{session_id}/").json()
        assert body["state"] in ("RUNNING", "LOST"), body
        return body if body["state"] == "LOST" else None

    body = wait_for(lost, 20, "the session to show LOST")
    assert body["reason"].startswith("desktop ran out of memory"), body
    assert f"memory limit {profile.memory_mb} MB" in body["reason"], body
    assert open_allocations(session_id) == 0
