"""``POST /api/agent/v1/gateway-events/`` (issue 34) with real node tokens: the gateway's
opens audited once, another node's tickets ignored and not counted, bad bodies answered 400
with a sentence and never a traceback; and the desired state a node with a gateway gets."""

from __future__ import annotations

import logging

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from nodeagent.protocol import DesiredState, ErrorAnswer
from nodeagent.protocol_gateway import GATEWAY_EVENTS_MAX, GatewayEventsAnswer
from scheduling.choices import AuditKind
from scheduling.models import AuditEvent, GatewayTicket, Node
from scheduling.services.gateway_tickets import check_gateway_open, do_issue_ticket
from scheduling.services.nodes import do_create_join_token, do_register

from ...conftest import gpu_inventory, registration

pytestmark = pytest.mark.django_db


@pytest.fixture
def desktop(gateway_desktop):  # type: ignore[no-untyped-def]
    return gateway_desktop


URL = "/api/agent/v1/gateway-events/"


def agent(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Node " + token)
    return client


def registered(hostname: str, gateway_port: int | None) -> tuple[Node, str]:
    body = registration(hostname, [gpu_inventory(f"GPU-{hostname}", 0, mig_slices=1)])
    body["join_token"] = do_create_join_token(hostname, actor="test")
    if gateway_port is not None:
        body["gateway_port"] = gateway_port
    node, token = do_register(body, None)
    assert token is not None
    return node, token


@pytest.fixture
def tokens(gateway_registration):  # type: ignore[no-untyped-def]
    """The tokens of the desktop's node (with a gateway) and of another node (without)."""
    _other, other = registered("gw-stranger", None)
    return gateway_registration[1], other


def opened_body(ticket: GatewayTicket, kind: str = "opened") -> dict:
    return {
        "events": [
            {
                "kind": kind,
                "ticket": ticket.jti,
                "session_id": ticket.session_id,
                "purpose": ticket.purpose,
                "at": timezone.now().isoformat(),
                "address": "10.4.4.4",
            }
        ]
    }


def issued(user, session) -> GatewayTicket:  # type: ignore[no-untyped-def]
    do_issue_ticket(user, check_gateway_open(user, session.pk, "screen"), "screen", "k", None)
    return GatewayTicket.objects.latest("pk")


def test_an_open_is_recorded_and_audited_once(desktop, owner, tokens):
    own, _other = tokens
    ticket = issued(owner, desktop)
    for _ in range(2):  # the agent sends the batch again
        answer = agent(own).post(URL, opened_body(ticket), format="json")
        assert answer.status_code == 200, answer.content
        assert GatewayEventsAnswer.model_validate(answer.json()).recorded == 1
    assert AuditEvent.objects.filter(kind=AuditKind.DESKTOP_OPENED).count() == 1


def test_another_nodes_ticket_is_ignored_and_not_counted(desktop, owner, tokens):
    _own, other = tokens
    ticket = issued(owner, desktop)
    answer = agent(other).post(URL, opened_body(ticket), format="json")
    assert (answer.status_code, answer.json()) == (200, {"recorded": 0})
    assert not AuditEvent.objects.filter(kind=AuditKind.DESKTOP_OPENED).exists()
    assert GatewayTicket.objects.get(pk=ticket.pk).opened_at is None


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"events": []},
        {"events": [{"kind": "opened"}]},
        {"events": "many"},
        [1, 2],
        {"events": [{"kind": "exploded", "ticket": "a" * 22, "session_id": 1}]},
        {
            "events": [
                {
                    "kind": "opened",
                    "ticket": "'; drop",
                    "session_id": 1,
                    "purpose": "screen",
                    "at": "2026-01-01T00:00:00Z",
                }
            ]
        },  # fmt: skip
        {
            "events": [
                {
                    "kind": "opened",
                    "ticket": "a" * 22,
                    "session_id": 10**30,
                    "purpose": "screen",
                    "at": "2026-01-01T00:00:00Z",
                }
            ]
        },  # fmt: skip
        {
            "events": [
                {
                    "kind": "input",
                    "ticket": "a" * 22,
                    "session_id": 1,
                    "purpose": "screen",
                    "at": "2026-01-01T00:00:00Z",
                    "input_events": -1,
                }
            ]
        },  # fmt: skip
        {
            "events": [
                {
                    "kind": "closed",
                    "ticket": "a" * 22,
                    "session_id": 1,
                    "purpose": "screen",
                    "at": "2026-01-01T00:00:00Z",
                    "reason": "a\x00b",
                }
            ]
        },  # fmt: skip
        {
            "events": [
                {
                    "kind": "closed",
                    "ticket": "a" * 22,
                    "session_id": 1,
                    "purpose": "screen",
                    "at": "2026-01-01T00:00:00Z",
                }
            ]
            * (GATEWAY_EVENTS_MAX + 1)
        },  # fmt: skip
    ],
)
def test_bad_bodies_are_answered_400_with_a_sentence(tokens, body, caplog):
    own, _other = tokens
    with caplog.at_level(logging.WARNING):
        answer = agent(own).post(URL, body, format="json")
    assert answer.status_code == 400, answer.content
    assert ErrorAnswer.model_validate(answer.json()).detail
    assert "Traceback" not in caplog.text


def test_a_body_that_is_not_json_and_a_missing_token_are_refused(tokens):
    own, _other = tokens
    answer = agent(own).post(URL, b"{not json", content_type="application/json")
    assert answer.status_code == 400
    assert APIClient().post(URL, {}, format="json").status_code == 401


def test_a_node_with_a_gateway_gets_its_keys_origins_and_revoked_tickets(desktop, owner, tokens):
    own, other = tokens
    desired = DesiredState.model_validate(agent(own).get("/api/agent/v1/desired/").json())
    assert desired.gateway is not None
    assert [key.kid for key in desired.gateway.keys] == [1]
    assert "http://127.0.0.1:8000" in desired.gateway.origins
    assert [s.revoked_tickets for s in desired.sessions] == [[]]
    bare = agent(other).get("/api/agent/v1/desired/").json()
    assert "gateway" not in bare  # a node without a gateway: nothing to key

    ticket = issued(owner, desktop)  # under a login session that does not exist: signed out
    desired = DesiredState.model_validate(agent(own).get("/api/agent/v1/desired/").json())
    assert [(r.ticket, r.why) for r in desired.sessions[0].revoked_tickets] == [
        (ticket.jti, "signed_out")
    ]
