"""An id no session can have is the agent's mistake, answered 400, never a 500 (issue 25).

Session ids are PostgreSQL bigints: a larger number in a URL or a body used to overflow the
query (a DataError, a 500 with a traceback). Every agent API path and body field that
carries a session id now says what is wrong, field by field.
"""

from __future__ import annotations

import json

import pytest
from asgiref.sync import async_to_sync
from channels.testing import HttpCommunicator
from rest_framework.test import APIClient

from nodeagent.protocol import ID_MAX
from portal.agents.wait import PATH as WAIT
from portal.asgi import application

pytestmark = pytest.mark.django_db(transaction=True)
HUGE = 99999999999999999999  # over 2**63 - 1


def agent(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Node " + token)
    return client


def field_errors(answer) -> list[str]:  # type: ignore[no-untyped-def]
    body = answer.json()
    assert body["detail"], body
    return [error["field"] for error in body["errors"]]


@pytest.mark.parametrize("session_id", [HUGE, ID_MAX + 1])
def test_a_report_url_with_an_id_over_bigint_is_a_400_naming_the_id(register_node, session_id):
    _node, token = register_node("ids-1", [])
    answer = agent(token).post(
        f"/api/agent/v1/sessions/{session_id}/report/", {"state": "RUNNING"}, format="json"
    )
    assert answer.status_code == 400, answer.content[:300]
    assert field_errors(answer) == ["session_id"]
    assert str(session_id) in answer.json()["detail"]


def test_a_report_url_with_the_largest_bigint_is_a_404_not_an_error(register_node):
    _node, token = register_node("ids-2", [])
    answer = agent(token).post(
        f"/api/agent/v1/sessions/{ID_MAX}/report/", {"state": "RUNNING"}, format="json"
    )
    assert answer.status_code == 404, answer.content[:300]


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        (
            "reports/",
            {"reports": [{"session_id": HUGE, "state": "RUNNING"}]},
            "reports.0.session_id",
        ),
        ("heartbeat/", {"gpus": [], "running_sessions": [HUGE]}, "running_sessions.0"),
        (
            "heartbeat/",
            {"gpus": [], "running_sessions": [], "usage": [{"session_id": HUGE}]},
            "usage.0.session_id",
        ),
    ],
)
def test_a_body_with_a_session_id_over_bigint_is_a_400_naming_the_field(
    register_node, path, body, field
):
    _node, token = register_node("ids-3", [])
    answer = agent(token).post(f"/api/agent/v1/{path}", body, format="json")
    assert answer.status_code == 400, answer.content[:300]
    assert field_errors(answer) == [field]


def test_the_waits_heartbeat_with_a_session_id_over_bigint_is_a_400(register_node):
    _node, token = register_node("ids-4", [])
    body = {"since": 0, "timeout_s": 1, "heartbeat": {"gpus": [], "running_sessions": [HUGE]}}
    headers = [(b"content-type", b"application/json"), (b"authorization", f"Node {token}".encode())]

    async def run():
        communicator = HttpCommunicator(
            application, "POST", WAIT, body=json.dumps(body).encode(), headers=headers
        )
        return await communicator.get_response(timeout=10)

    response = async_to_sync(run)()
    assert response["status"] == 400
    answer = json.loads(response["body"])
    assert [e["field"] for e in answer["errors"]] == ["heartbeat.running_sessions.0"]
