"""The portal (daphne) goes away for a while: desktops keep running, states catch up after.

While the portal is down one desktop is killed. The other keeps running and answering VNC
the whole time; when daphne is back on the same port the agent reports the dead one LOST.
"""

from __future__ import annotations

import time

import pytest

from scheduling.models import Session
from scheduling.services.nodes import do_create_join_token

from ..conftest import TEST_IMAGE
from ..integration.stack import write_fleet
from .helpers import (
    api_client,
    handshake,
    open_allocations,
    session_containers,
    states,
    submit,
    wait_node_up,
    wait_states,
)

pytestmark = [pytest.mark.faults, pytest.mark.integration, pytest.mark.docker]

PORTAL_DOWN_S = 60.0  # "a minute", as the issue has it
CATCH_UP_S = 20.0  # after daphne answers again


def test_desktops_survive_a_portal_outage_and_states_catch_up(
    stack, make_user, profile, docker_engine, require_image, tmp_path
):
    require_image(TEST_IMAGE)
    stack.start_agent(
        do_create_join_token(stack.node, actor="test"),
        write_fleet(tmp_path / "fleet.yaml", stack.node, 2),
    )
    wait_node_up(stack.node)
    keep = submit(api_client(stack, make_user("ada").username), profile)
    doomed = submit(api_client(stack, make_user("ben").username), profile)
    wait_states([keep, doomed], "RUNNING", 60)

    down_at = time.monotonic()
    stack.stop("portal")
    [dead] = session_containers(stack, docker_engine, doomed)
    dead.kill()
    while time.monotonic() - down_at < PORTAL_DOWN_S:
        time.sleep(5)
        assert stack.processes["agent"].poll() is None, stack.log_tail("agent")
        assert handshake(keep, timeout=5).version.startswith("003.")
    # Nothing could tell the portal meanwhile.
    assert states([keep, doomed]) == {keep: "RUNNING", doomed: "RUNNING"}

    stack.start_portal()
    back_at = time.monotonic()
    wait_states([doomed], "LOST", CATCH_UP_S)
    caught_up_s = time.monotonic() - back_at
    print(f"portal down {back_at - down_at:.0f} s; LOST reported {caught_up_s:.1f} s after")
    assert "exited with code 137" in Session.objects.get(pk=doomed).reason
    assert open_allocations(doomed) == 0

    # The survivor was never touched: same container, still RUNNING, still answering.
    [alive] = session_containers(stack, docker_engine, keep)
    assert alive.status == "running"
    assert Session.objects.get(pk=keep).container_id == alive.id
    assert states([keep]) == {keep: "RUNNING"}
    assert handshake(keep).version.startswith("003.")
    assert "agent stopped" not in (stack.logs / "agent.log").read_text()
