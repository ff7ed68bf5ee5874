"""PortalClient: wire paths, the node token header, and typed errors."""

from __future__ import annotations

import json

import httpx
import pytest

from nodeagent.portal_client import (
    BadAnswer,
    Conflict,
    PortalClient,
    PortalError,
    PortalUnavailable,
    Unauthorized,
)
from nodeagent.protocol import Registration, SessionReport


def registration() -> Registration:
    return Registration(
        protocol_version=1, agent_version="t", hostname="gpu-1", join_token="join",
        address="127.0.0.1", cpu_count=1, memory_mb=1, labels={}, runtime="simulated", gpus=[],
    )  # fmt: skip


def client_answering(status: int, body: object, seen: list[httpx.Request]) -> PortalClient:
    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(status, json=body)

    return PortalClient("http://portal.test/", transport=httpx.MockTransport(handler))


def test_report_posts_to_the_session_path_with_the_node_token() -> None:
    seen: list[httpx.Request] = []
    client = client_answering(200, {"state": "RUNNING"}, seen)
    client.node_token = "tok"

    state = client.report(12, SessionReport(state="RUNNING", host="127.0.0.1", port=40000))

    assert state == "RUNNING"
    assert seen[0].url.path == "/api/agent/v1/sessions/12/report/"
    assert seen[0].headers["Authorization"] == "Node tok"
    # On the wire: the fields set, nothing else.
    assert json.loads(seen[0].content) == {"state": "RUNNING", "host": "127.0.0.1", "port": 40000}


def test_register_keeps_the_node_token_it_is_given() -> None:
    seen: list[httpx.Request] = []
    answer = {"node_id": 3, "node_token": "new", "heartbeat_interval_s": 5, "poll_interval_s": 1}
    client = client_answering(201, answer, seen)

    client.register(registration())

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
        client.report(1, SessionReport(state="RUNNING"))
    assert caught.value.state == "ENDED"


def test_unreachable_portal_is_portal_unavailable() -> None:
    client = PortalClient("http://127.0.0.1:9", timeout=httpx.Timeout(1.0))
    with pytest.raises(PortalUnavailable, match="unreachable"):
        client.desired()


def test_a_report_after_the_agent_closed_its_client_is_portal_unavailable() -> None:
    """At the agent's stop, desktop action threads may still report: told the portal is out
    of reach (the outbox keeps the report), not httpx's "client has been closed" error."""
    seen: list[httpx.Request] = []
    client = client_answering(200, {"state": "RUNNING"}, seen)
    client.close()
    with pytest.raises(PortalUnavailable, match="the agent is stopping"):
        client.report(12, SessionReport(state="RUNNING", host="127.0.0.1", port=40000))
    assert seen == []


SESSION = {
    "session_id": 1, "user": "ada", "course": "", "image": "deskpool/tiny:latest", "cpus": 1,
    "memory_mb": 512, "pids_limit": 256, "shm_mb": 64, "gpu_devices": [], "vnc_password": "pw",
    "home_volume": "deskpool-aaaa11112222-home-ada",
}  # fmt: skip
WARM = {k: v for k, v in SESSION.items() if k not in ("session_id", "user", "vnc_password",
                                                       "home_volume")}  # fmt: skip


@pytest.mark.parametrize(
    ("path", "body", "problem"),
    [("desired", {"sessions": [{**SESSION, "user": None}]}, "sessions.0.user: Input should be"),
     ("desired", {"sessions": [{**SESSION, "vnc_password": "123456789"}]},
      "sessions.0.vnc_password: String should have at most 8 characters"),
     ("desired", ["not", "an", "object"], "(body): Input should be"),
     ("desired", {"sessions": [], "warm": [{**WARM, "key": "../etc", "booking": 1}]},
      "warm.0.key: String should match pattern"),
     ("report", {"stat": "RUNNING"}, "state: Field required")],
)  # fmt: skip
def test_an_answer_that_is_not_its_model_is_a_bad_answer_naming_the_field(
    path: str, body: object, problem: str
) -> None:
    client = client_answering(200, body, [])
    with pytest.raises(BadAnswer, match="not a valid") as caught:
        if path == "desired":
            client.desired()
        else:
            client.report(1, SessionReport(state="RUNNING"))
    assert problem in str(caught.value)


def test_answer_fields_the_agent_does_not_know_are_ignored() -> None:
    """A newer portal may add answer fields within protocol version 1."""
    body = {"sessions": [{**SESSION, "gpu_model": "A100"}], "drain_at": "2030-01-01T00:00:00Z"}
    desired = client_answering(200, body, []).desired()
    assert [s.session_id for s in desired.sessions] == [1] and desired.warm == []
