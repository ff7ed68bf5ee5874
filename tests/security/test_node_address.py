"""A node's address is a host on the management network, nothing else (issue 25).

A ticket sends the browser to the node's gateway at the address the node declared when it
registered (``DESKPOOL_GATEWAY_URL`` filled with it and the gateway's port). When the portal's
relay connected there (before issue 34), ``127.0.0.1:18081/x?`` steered it to another port
and ``localhost:18081#`` gave a 500. Through the agent API: an address that is not a bare
hostname or IP literal is a 400 naming the field; one outside DESKPOOL_NODE_ADDRESS_NETWORKS
is a 400 saying which setting allows it; every change of a node's address is audited with
the old and the new. And a stored address that is not one (a row from before these checks)
gives no gateway endpoint, so no ticket's URL is built on it (a 409, not a 500:
tests/scheduling/services/test_gateway_tickets.py).
"""

from __future__ import annotations

import ipaddress

import pytest
from rest_framework.test import APIClient

from scheduling.choices import AuditKind
from scheduling.models import AuditEvent, Node, Session
from scheduling.services import Conflict
from scheduling.services.gateway_tickets import gateway_url
from scheduling.services.node_address import desktop_endpoint
from scheduling.services.nodes import do_create_join_token

from ..conftest import registration

pytestmark = pytest.mark.django_db
REGISTER = "/api/agent/v1/register/"


def join(hostname: str, address: str):  # type: ignore[no-untyped-def]
    body = registration(hostname, [], do_create_join_token(hostname, actor="test"))
    body["address"] = address
    return APIClient().post(REGISTER, body, format="json")


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1:18081/x?",
        "localhost:18081#",
        "10.0.0.5:6080",
        "http://10.0.0.5",
        "ws://10.0.0.5/",
        "user@10.0.0.5",
        "10.0.0.5/websockify",
        "10.0.0.5?x=1",
        "10.0.0.5#x",
        "gpu a01",
        " 10.0.0.5",
        "[::1]",
        "10.0.0.300",
        "0.0.0.0",
        "-gpu.campus",
    ],
)
def test_a_node_address_that_is_not_a_bare_host_is_refused_with_400(address):
    answer = join("gpu-x", address)
    assert answer.status_code == 400, answer.content[:300]
    body = answer.json()
    assert [error["field"] for error in body["errors"]] == ["address"]
    assert "hostname or an IP address" in body["detail"] or "not one node" in body["detail"]
    assert not Node.objects.filter(hostname="gpu-x").exists()


@pytest.mark.parametrize("address", ["8.8.8.8", "169.254.169.254", "2001:db8::1"])
def test_a_node_address_outside_the_management_network_is_refused_with_400(address):
    answer = join("gpu-y", address)
    assert answer.status_code == 400, answer.content[:300]
    body = answer.json()
    assert [error["field"] for error in body["errors"]] == ["address"]
    assert "DESKPOOL_NODE_ADDRESS_NETWORKS" in body["detail"]
    assert not Node.objects.filter(hostname="gpu-y").exists()


def test_the_management_networks_setting_decides_which_addresses_are_accepted(settings):
    settings.NODE_ADDRESS_NETWORKS = (ipaddress.ip_network("192.0.2.0/24"),)
    assert join("gpu-a", "10.0.0.5").status_code == 400  # private, but not this campus's
    answer = join("gpu-b", "192.0.2.7")
    assert answer.status_code == 201, answer.content[:300]
    assert Node.objects.get(hostname="gpu-b").address == "192.0.2.7"


@pytest.mark.parametrize("address", ["localhost", "10.20.0.11", "::1", "fd00:20::11"])
def test_a_hostname_or_ip_literal_on_the_management_network_is_accepted(address):
    answer = join("gpu-z", address)
    assert answer.status_code == 201, answer.content[:300]
    assert Node.objects.get(hostname="gpu-z").address == address


def test_every_change_of_a_nodes_address_is_audited_with_the_old_and_the_new():
    first = join("gpu-m", "10.0.0.5")
    assert first.status_code == 201
    registered = AuditEvent.objects.get(kind=AuditKind.NODE_REGISTERED)
    assert registered.data["address"] == "10.0.0.5"
    node_agent = APIClient()
    node_agent.credentials(HTTP_AUTHORIZATION="Node " + first.json()["node_token"])
    body = registration("gpu-m", [])
    body["address"] = "10.0.0.6"
    assert node_agent.post(REGISTER, body, format="json").status_code == 200
    assert node_agent.post(REGISTER, body, format="json").status_code == 200  # unchanged
    changes = AuditEvent.objects.filter(kind=AuditKind.NODE_ADDRESS_CHANGED)
    assert [(e.actor, e.data) for e in changes] == [
        ("node:gpu-m", {"old": "10.0.0.5", "new": "10.0.0.6"})
    ]
    assert changes[0].get_kind_display() == "Node address changed"

    body["address"] = "8.8.8.8"  # refused: nothing changes, nothing more is audited
    assert node_agent.post(REGISTER, body, format="json").status_code == 400
    assert Node.objects.get(hostname="gpu-m").address == "10.0.0.6"
    assert changes.count() == 1


@pytest.mark.parametrize(
    ("address", "port", "url"),
    [
        ("127.0.0.1", 6080, "ws://127.0.0.1:6080/screen"),
        ("::1", 6080, "ws://[::1]:6080/screen"),
        ("localhost", 1, "ws://127.0.0.1:1/screen"),  # the address it checked
        ("127.0.0.1:18081/x?", 6080, None),
        ("localhost:18081#", 6080, None),
        ("8.8.8.8", 6080, None),
        ("127.0.0.1", 0, None),
        ("127.0.0.1", 65536, None),
    ],
)
def test_a_tickets_gateway_url_is_built_only_from_a_valid_host_and_port(
    settings, address, port, url
):
    settings.GATEWAY_URL = "ws://{address}:{port}"
    session = Session(node=Node(address=address, gateway_port=port))
    if url is None:
        with pytest.raises(Conflict):
            gateway_url(session, "screen")
    else:
        assert gateway_url(session, "screen") == url


@pytest.mark.parametrize(
    ("address", "port", "endpoint"),
    [
        ("127.0.0.1", 6081, ("127.0.0.1", 6081)),
        ("::1", 6081, ("::1", 6081)),  # no brackets: the address itself
        ("localhost", 6081, ("127.0.0.1", 6081)),  # the address it checked
        ("127.0.0.1:18081/x?", 6081, None),
        ("8.8.8.8", 6081, None),
        ("127.0.0.1", 0, None),
        ("127.0.0.1", 65536, None),
    ],
)
def test_a_gateway_endpoint_is_only_a_checked_ip_and_port(address, port, endpoint):
    assert desktop_endpoint(address, port) == endpoint
