"""kill -9 the node agent while it starts ten desktops; a restarted agent finishes the job.

The agent is SIGKILLed as soon as the first containers exist and before all ten sessions
are RUNNING. Started again with the same state directory (and no join token) it registers
with its stored credential, adopts what is running, starts what is missing, and every
session ends RUNNING with exactly one container.
"""

from __future__ import annotations

import signal
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest

from nodeagent.readiness import vnc_handshake
from scheduling.models import AuditEvent, Session
from scheduling.services.nodes import do_create_join_token

from ..conftest import TEST_IMAGE
from ..integration.stack import wait_for, write_fleet
from .helpers import handshake, open_allocations, states, submit, token_client, wait_node_up

pytestmark = [pytest.mark.faults, pytest.mark.integration, pytest.mark.docker]

DESKTOPS = 10
KILL_AT_CONTAINERS = 3  # kill -9 once this many containers exist


def test_agent_killed_while_starting_ten_desktops_recovers_without_duplicates(
    stack, make_user, profile, docker_engine, require_image, tmp_path
):
    require_image(TEST_IMAGE)
    stack.start_agent(
        do_create_join_token(stack.node, actor="test"),
        # Two A100s of five 1g.10gb each: an A100 holds seven at most (the MIG tables).
        write_fleet(tmp_path / "fleet.yaml", stack.node, DESKTOPS // 2, gpus=2),
    )
    wait_node_up(stack.node)
    clients = [token_client(stack, make_user(f"student{i}")) for i in range(DESKTOPS)]
    with ThreadPoolExecutor(DESKTOPS) as burst:  # all ten at once
        ids = list(burst.map(lambda client: submit(client, profile), clients))

    def mid_start():
        if len(stack.node_containers(docker_engine)) < KILL_AT_CONTAINERS:
            return None
        now = states(ids)
        return now if list(now.values()).count("RUNNING") < DESKTOPS else "too late"

    at_kill = wait_for(mid_start, 60, "the first desktop containers")
    stack.stop("agent", signal.SIGKILL)
    assert at_kill != "too late", "all ten were RUNNING before the agent could be killed"
    left_behind = len(stack.node_containers(docker_engine))
    print(f"at kill: {Counter(at_kill.values())}, {left_behind} container(s) left behind")
    assert Counter(at_kill.values())["RUNNING"] < DESKTOPS

    stack.restart_agent()
    # RUNNING means "answers a VNC handshake", also for a desktop adopted half-started:
    # each session is probed once, right when it is first seen RUNNING.
    not_ready: dict[int, str] = {}
    probed: set[int] = set()

    def all_running():
        now = states(ids)
        assert "LOST" not in now.values() and "FAILED" not in now.values(), now
        for session_id in [k for k, v in now.items() if v == "RUNNING" and k not in probed]:
            probed.add(session_id)
            session = Session.objects.get(pk=session_id)
            try:
                vnc_handshake("127.0.0.1", session.desktop_port, timeout_s=2)
            except Exception as error:
                not_ready[session_id] = repr(error)
        return len(probed) == DESKTOPS

    wait_for(all_running, 90, "all ten sessions RUNNING after the restart")
    assert not not_ready, f"reported RUNNING before the desktop answered: {not_ready}"

    # Exactly one container per session, all running, none for anything else.
    containers = stack.node_containers(docker_engine)
    per_session = Counter(c.labels["deskpool.session"] for c in containers)
    assert per_session == Counter({str(i): 1 for i in ids}), per_session
    assert all(c.status == "running" for c in containers)
    by_session = {int(c.labels["deskpool.session"]): c for c in containers}
    for session_id in ids:
        session = Session.objects.get(pk=session_id)
        assert session.container_id == by_session[session_id].id
        assert open_allocations(session_id) == 1
        assert handshake(session_id).version.startswith("003.")
        kinds = AuditEvent.objects.filter(session_id=session_id, kind="session.transition")
        assert not kinds.filter(data__to__in=["LOST", "FAILED", "QUEUED"]).exists()

    # It came back with its stored credential, not the (one-time) join token.
    log = (stack.logs / "agent.log").read_text()
    assert log.count("registered as node") == 2
