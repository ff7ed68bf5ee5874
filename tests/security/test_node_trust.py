"""A node is trusted only for itself (issue 14, findings 3 and 4).

Through the agent API as a node would call it: a join token cannot take over a registered
node, and a node cannot list another node's GPUs or MIG devices; such a claim is refused,
changes nothing, is audited against the holder and raises the "GPU claimed by another node"
alert.
"""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from scheduling.choices import AuditKind
from scheduling.models import Alert, AuditEvent, Gpu, Node, Slice
from scheduling.services.alerts import evaluate_alerts
from scheduling.services.nodes import do_create_join_token

from ..conftest import gpu_inventory, registration

pytestmark = pytest.mark.django_db
REGISTER = "/api/agent/v1/register/"


def agent(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Node " + token)
    return client


def join(hostname: str, gpus: list[dict], **token_options) -> tuple[int, dict]:
    token = do_create_join_token(hostname, actor="test", **token_options)
    answer = APIClient().post(REGISTER, registration(hostname, gpus, token), format="json")
    return answer.status_code, answer.json()


def test_an_unbound_join_token_cannot_take_over_a_registered_node(pool):
    before = Node.objects.get(hostname="node-1").token_hash
    token = do_create_join_token("", actor="test")  # unbound: any host
    body = registration("node-1", [gpu_inventory("GPU-new", 0)], token)
    answer = APIClient().post(REGISTER, body, format="json")
    assert answer.status_code == 401
    assert "already registered" in answer.json()["detail"]
    assert Node.objects.get(hostname="node-1").token_hash == before  # credential unchanged


def test_a_join_token_bound_to_another_host_is_refused(db):
    token = do_create_join_token("gpu-a", actor="test")
    answer = APIClient().post(REGISTER, registration("gpu-b", [], token), format="json")
    assert answer.status_code == 401
    assert not Node.objects.exists()


def test_a_new_node_listing_another_nodes_gpu_is_refused_and_alerted(pool):
    status, body = join("intruder", [gpu_inventory("GPU-a", 0, mig_slices=4)])
    assert status == 409, body
    assert "GPU-a" in body["detail"]
    assert not Node.objects.filter(hostname="intruder").exists()
    assert Gpu.objects.get(uuid="GPU-a").node.hostname == "node-1"  # not moved
    event = AuditEvent.objects.get(kind=AuditKind.NODE_CLAIM_REFUSED)
    assert event.node == pool and event.data["claimed_by"] == "intruder"

    evaluate_alerts()
    alert = Alert.objects.open().get(rule__name="GPU claimed by another node")
    assert alert.subject == "node:node-1"


def test_a_registered_node_cannot_add_another_nodes_mig_device(pool):
    status, body = join("node-2", [gpu_inventory("GPU-z", 0, mig_slices=1)])
    assert status == 201, body
    mine = gpu_inventory("GPU-z", 0, mig_slices=1)
    mine["mig_instances"].append(
        {"uuid": "MIG-GPU-b-0", "profile": "1g.10gb", "memory_mb": 9984}  # node-1's device
    )
    answer = agent(body["node_token"]).post(REGISTER, registration("node-2", [mine]), format="json")
    assert answer.status_code == 409, answer.content
    assert Slice.objects.filter(device_uuid="MIG-GPU-b-0").get().gpu.node == pool
    assert Slice.objects.filter(gpu__node__hostname="node-2").count() == 1


def test_a_gpu_the_old_node_no_longer_has_may_move(pool):
    """A card moved to another machine: once its old node re-registered without it, the new
    node may list it."""
    old = Node.objects.get(hostname="node-1")
    Gpu.objects.filter(node=old, uuid="GPU-c").update(present=False)
    status, body = join("node-2", [gpu_inventory("GPU-c", 0, shares=2)])
    assert status == 201, body
    assert Gpu.objects.get(uuid="GPU-c").node.hostname == "node-2"
