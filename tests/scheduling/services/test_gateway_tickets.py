"""Tickets to a node's desktop gateway (issue 34): who gets one (the owner and admins, as the
portal's relays, now gone, decided), what it says, and that the node's gateway accepts it
under the keys its desired state carries, before and after a key rotation."""

from __future__ import annotations

import time

import pytest
from django.core.management import call_command
from guardian.shortcuts import assign_perm

from nodeagent.gateway.codes import CLOSE_TICKET_FOREIGN
from nodeagent.gateway.tickets import ReplayMemo, TicketRefused, check_ticket, key_bytes
from scheduling.choices import AuditKind, SessionState
from scheduling.models import AuditEvent, GatewayTicket, Node, Session
from scheduling.services import Conflict, NotFound, ServiceError
from scheduling.services.agent_sessions import desired_state
from scheduling.services.agent_wake import desired_version
from scheduling.services.eligibility import Forbidden
from scheduling.services.gateway_keys import do_rotate_gateway_key, ticket_key
from scheduling.services.gateway_tickets import (
    NoSound,
    check_gateway_open,
    do_issue_ticket,
    login_session_hash,
)

from ...conftest import GATEWAY_PORT, sign_in

pytestmark = pytest.mark.django_db


@pytest.fixture
def desktop(gateway_desktop):  # type: ignore[no-untyped-def]
    return gateway_desktop


def issue(user, session, purpose="screen", login=None):  # type: ignore[no-untyped-def]
    checked = check_gateway_open(user, session.pk, purpose)
    return do_issue_ticket(user, checked, purpose, login or sign_in(user), "10.1.2.3")


def gateway_keys(node: Node) -> dict[int, bytes]:
    """The keys the node's gateway holds: those of its desired state."""
    access = desired_state(Node.objects.get(pk=node.pk)).gateway
    assert access is not None
    return {key.kid: key_bytes(key.key) for key in access.keys}


def test_the_owner_gets_a_ticket_the_gateway_accepts(desktop, owner):
    login = sign_in(owner)
    issued = issue(owner, desktop, login=login)

    claims = check_ticket(
        issued.ticket,
        keys=gateway_keys(desktop.node),
        node_id=desktop.node_id,
        purpose="screen",
        memo=ReplayMemo(),
    )
    assert (claims.sid, claims.uid, claims.nid, claims.pur) == (
        desktop.pk,
        owner.pk,
        desktop.node_id,
        "screen",
    )
    assert claims.sin == login_session_hash(login) and login not in issued.ticket
    assert issued.url == f"ws://127.0.0.1:{GATEWAY_PORT}/screen"
    row = GatewayTicket.objects.get(jti=claims.jti)
    assert (row.via, row.login_session, row.opened_at, row.address) == (
        "owner",
        login,
        None,
        "10.1.2.3",
    )
    assert not AuditEvent.objects.filter(kind=AuditKind.DESKTOP_OPENED).exists()  # not yet


def test_an_admin_gets_a_ticket_to_anyones_desktop(desktop, admin_user):
    issued = issue(admin_user, desktop)
    assert GatewayTicket.objects.get().via == "admin"
    assert issued.url.endswith("/screen")


def test_a_stranger_is_told_there_is_no_such_desktop(desktop, stranger):
    with pytest.raises(NotFound):
        check_gateway_open(stranger, desktop.pk, "screen")


def test_someone_who_may_see_the_desktop_but_not_open_it_is_forbidden(desktop, stranger):
    assign_perm("scheduling.view_session", stranger, desktop)  # a TA, say
    with pytest.raises(Forbidden):
        check_gateway_open(stranger, desktop.pk, "screen")


def test_a_desktop_that_does_not_run_gets_no_ticket(desktop, owner):
    Session.objects.filter(pk=desktop.pk).update(state=SessionState.SUSPENDED)
    with pytest.raises(Conflict):
        check_gateway_open(owner, desktop.pk, "screen")


def test_a_node_without_a_gateway_gets_no_ticket(desktop, owner):
    Node.objects.filter(pk=desktop.node_id).update(gateway_port=None)
    with pytest.raises(Conflict, match="gateway"):
        check_gateway_open(owner, desktop.pk, "screen")


def test_a_node_address_outside_the_management_network_gets_no_ticket(desktop, owner):
    Node.objects.filter(pk=desktop.node_id).update(address="8.8.8.8")
    with pytest.raises(Conflict):
        check_gateway_open(owner, desktop.pk, "screen")


def test_sound_only_where_the_desktop_serves_some(desktop, owner):
    assert issue(owner, desktop, "sound").url.endswith("/sound")
    Session.objects.filter(pk=desktop.pk).update(desktop_audio_port=None)
    with pytest.raises(NoSound):
        check_gateway_open(owner, desktop.pk, "sound")


@pytest.mark.parametrize("purpose", ["", "files", "SCREEN", "admin"])
def test_only_the_gateways_purposes_are_issued(desktop, owner, purpose):
    with pytest.raises(ServiceError) as refused:
        check_gateway_open(owner, desktop.pk, purpose)
    assert refused.value.field == "purpose"


def test_the_key_is_derived_from_the_secret_the_node_and_its_id(desktop):
    node = desktop.node
    assert len(ticket_key(node.pk, 1)) == 43
    assert ticket_key(node.pk, 1) != ticket_key(node.pk, 2) != ticket_key(node.pk + 1, 2)
    assert gateway_keys(node).keys() == {1}


def test_after_a_rotation_a_ticket_signed_before_still_opens_once(
    desktop, owner, django_capture_on_commit_callbacks
):
    node = desktop.node
    before = issue(owner, desktop)
    version = desired_version(node.pk)
    with django_capture_on_commit_callbacks(execute=True):
        assert do_rotate_gateway_key(node, actor="user:root", reason="drill") == 2
    assert desired_version(node.pk) > version  # the node was woken to take the new key
    assert list(gateway_keys(node)) == [2, 1]  # the new one first, the one before still
    event = AuditEvent.objects.get(kind=AuditKind.NODE_GATEWAY_KEY_ROTATED)
    assert (event.node_id, event.data) == (node.pk, {"old": 1, "new": 2, "reason": "drill"})

    after = issue(owner, desktop)
    memo = ReplayMemo()
    for issued in (before, after):
        check_ticket(
            issued.ticket, keys=gateway_keys(node), node_id=node.pk, purpose="screen", memo=memo
        )
    do_rotate_gateway_key(Node.objects.get(pk=node.pk), actor="cli")
    assert list(gateway_keys(node)) == [3, 2]
    stale = issue(owner, desktop)
    Node.objects.filter(pk=node.pk).update(gateway_key_id=5)  # two rotations later
    with pytest.raises(TicketRefused) as refused:
        check_ticket(
            stale.ticket,
            keys=gateway_keys(node),
            node_id=node.pk,
            purpose="screen",
            memo=ReplayMemo(),
            now=time.time(),
        )
    assert refused.value.code == CLOSE_TICKET_FOREIGN


def test_the_rotate_command_rotates_one_node_or_all(desktop, capsys):
    call_command("rotate_gateway_key", "gw-1")
    call_command("rotate_gateway_key", "--all")
    assert Node.objects.get(pk=desktop.node_id).gateway_key_id == 3
    assert "gw-1: gateway key 3" in capsys.readouterr().out
    assert AuditEvent.objects.filter(kind=AuditKind.NODE_GATEWAY_KEY_ROTATED).count() == 2


def test_a_registration_stores_the_gateway_port(register_node):
    from scheduling.services.nodes import do_register

    from ...conftest import registration

    node, token = register_node("gw-2", [])
    assert node.gateway_port is None
    do_register({**registration("gw-2", []), "gateway_port": 6091}, node)
    assert Node.objects.get(pk=node.pk).gateway_port == 6091
    assert desired_state(Node.objects.get(pk=node.pk)).gateway is not None
