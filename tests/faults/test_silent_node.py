"""A node stops heartbeating (its agent is SIGSTOPped): first nothing new goes there,
then its sessions are requeued.

Portal and worker run with short thresholds (unhealthy after 3 s, silent after 16 s: room
for a desktop to start on the other node on a busy 2-core machine; agents heartbeat every
second); the sweep that beat would run every 15 s is called from the test with the same
settings, so its timing is the test's. Node A gets 2 slices, node B 1.
"""

from __future__ import annotations

import signal
import time

import pytest
from django.utils import timezone

from scheduling.models import AuditEvent, Node, Session
from scheduling.services.health import do_sweep_silent_nodes
from scheduling.services.nodes import do_create_join_token

from ..conftest import TEST_IMAGE
from ..integration.stack import wait_for, write_fleet
from .conftest import FAULT_NODE
from .helpers import api_client, states, submit, wait_node_up, wait_states

pytestmark = [pytest.mark.faults, pytest.mark.integration, pytest.mark.docker]

UNHEALTHY_AFTER_S = 3.0
LOST_AFTER_S = 16.0
NODE_A = FAULT_NODE
NODE_B = f"{FAULT_NODE}-b"


@pytest.fixture
def stack_options() -> dict:
    return {
        "node": NODE_A,
        "extra_env": {
            "DESKPOOL_NODE_HEARTBEAT_TIMEOUT_S": str(UNHEALTHY_AFTER_S),
            "DESKPOOL_NODE_LOST_AFTER_S": str(LOST_AFTER_S),
            "DESKPOOL_AGENT_HEARTBEAT_INTERVAL_S": "1",
        },
    }


def silence(hostname: str) -> float:
    beat = Node.objects.get(hostname=hostname).last_heartbeat
    return (timezone.now() - beat).total_seconds()


def test_silent_node_gets_nothing_new_and_its_sessions_are_requeued(
    stack, make_user, profile, docker_engine, require_image, tmp_path, settings
):
    require_image(TEST_IMAGE)
    settings.NODE_HEARTBEAT_TIMEOUT_S = UNHEALTHY_AFTER_S
    settings.NODE_LOST_AFTER_S = LOST_AFTER_S
    stack.start_agent(
        do_create_join_token(NODE_A, actor="test"), write_fleet(tmp_path / "a.yaml", NODE_A, 2)
    )
    wait_node_up(NODE_A)
    on_a = submit(api_client(stack, make_user("ada").username), profile)
    wait_states([on_a], "RUNNING", 60)
    assert Session.objects.get(pk=on_a).node.hostname == NODE_A
    stack.start_agent(
        do_create_join_token(NODE_B, actor="test"),
        write_fleet(tmp_path / "b.yaml", NODE_B, 1),
        node=NODE_B,
        name="agent-b",
    )
    wait_node_up(NODE_B)

    stack.send_signal("agent", signal.SIGSTOP)  # node A's agent freezes: no more heartbeats
    stopped_at = time.monotonic()
    wait_for(lambda: silence(NODE_A) > UNHEALTHY_AFTER_S + 0.5, 10, "node A to be unhealthy")
    assert do_sweep_silent_nodes().requeued == 0  # unhealthy, not yet silent

    # A has a free slice but is unhealthy: the new desktop goes to B, the next one waits.
    to_b = submit(api_client(stack, make_user("ben").username), profile)
    wait_states([to_b], "RUNNING", 30)
    assert Session.objects.get(pk=to_b).node.hostname == NODE_B
    waiting = submit(api_client(stack, make_user("cy").username), profile)
    wait_for(
        lambda: (
            Session.objects.filter(pk=waiting, state="QUEUED", queue_position__isnull=False)
            .exclude(reason_code__in=["", "submitted"])
            .first()
        ),
        10,
        "the scheduler's reason for waiting",
    )
    assert silence(NODE_A) < LOST_AFTER_S, "the test was too slow to see the gap"
    assert do_sweep_silent_nodes().requeued == 0
    assert states([on_a, waiting]) == {on_a: "RUNNING", waiting: "QUEUED"}
    print("queued with:", Session.objects.get(pk=waiting).reason)

    # Past the longer threshold the sweep moves A's session back to the queue.
    wait_for(lambda: silence(NODE_A) > LOST_AFTER_S, LOST_AFTER_S + 5, "node A to be silent")
    result = do_sweep_silent_nodes()
    assert result.nodes == (NODE_A,) and result.requeued == 1, result
    print(f"requeued {time.monotonic() - stopped_at:.1f} s after SIGSTOP")
    session = Session.objects.get(pk=on_a)
    assert session.state == "QUEUED" and session.node is None
    assert not session.allocations.filter(released_at=None).exists()
    requeue = AuditEvent.objects.get(session_id=on_a, data__to="QUEUED")
    assert requeue.data["reason_code"] == "node_silent_requeued"
    assert requeue.data["reason_params"]["node"] == NODE_A
    assert f"node {NODE_A} stopped answering" in session.reason
    assert AuditEvent.objects.filter(kind="node.silent", node__hostname=NODE_A).count() == 1
    # Nothing is placed on the silent node meanwhile: A's slices stay free, B is full.
    time.sleep(1.0)
    assert states([on_a, waiting, to_b]) == {on_a: "QUEUED", waiting: "QUEUED", to_b: "RUNNING"}
    assert not Session.objects.filter(node__hostname=NODE_A).exists()
    stack.stop("agent", signal.SIGKILL)
