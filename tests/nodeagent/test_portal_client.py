"""PortalClient: wire paths, the node token header, and typed errors."""

from __future__ import annotations

import json

import httpx
import pytest

from nodeagent.portal_client import (
    Conflict,
    PortalClient,
    PortalError,
    PortalUnavailable,
    Unauthorized,
)


def client_answering(status: int, body: object, seen: list[httpx.Request]) -> PortalClient:
    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(status, json=body)

    return PortalClient("http://portal.test/", transport=httpx.MockTransport(handler))


def test_report_posts_to_the_session_path_with_the_node_token() -> None:
    seen: list[httpx.Request] = []
    client = client_answering(200, {"state": "RUNNING"}, seen)
    client.node_token = "tok"

    state = client.report(12, {"state": "RUNNING", "host": "127.0.0.1", "port": 40000})

    assert state == "RUNNING"
    assert seen[0].url.path == "/api/agent/v1/sessions/12/report/"
    assert seen[0].headers["Authorization"] == "Node tok"
    assert json.loads(seen[0].content)["port"] == 40000


def test_register_keeps_the_node_token_it_is_given() -> None:
    seen: list[httpx.Request] = []
    answer = {"node_id": 3, "node_token": "new", "heartbeat_interval_s": 5, "poll_interval_s": 1}
    client = client_answering(201, answer, seen)

    client.register({"protocol_version": 1, "join_token": "join"})  # type: ignore[typeddict-item]

    assert "Authorization" not in seen[0].headers
    assert client.node_token == "new"


@pytest.mark.parametrize(
    ("status", "error"),
    [(401, Unauthorized), (403, Unauthorized), (409, Conflict), (503, PortalUnavailable),
     (400, PortalError)],
)  # fmt: skip
def test_error_statuses_become_typed_errors(status: int, error: type[Exception]) -> None:
    client = client_answering(status, {"detail": "nope", "state": "ENDED"}, [])
    with pytest.raises(error, match="nope"):
        client.desired()


def test_conflict_carries_the_portal_state() -> None:
    client = client_answering(409, {"detail": "ended", "state": "ENDED"}, [])
    with pytest.raises(Conflict) as caught:
        client.report(1, {"state": "RUNNING"})
    assert caught.value.state == "ENDED"


def test_unreachable_portal_is_portal_unavailable() -> None:
    client = PortalClient("http://127.0.0.1:9", timeout=httpx.Timeout(1.0))
    with pytest.raises(PortalUnavailable, match="unreachable"):
        client.desired()
