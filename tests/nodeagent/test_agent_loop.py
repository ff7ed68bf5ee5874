"""The agent: configuration, registration with a stored credential, and one round of work."""

from __future__ import annotations

import json
import logging
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest

import nodeagent
from nodeagent.__main__ import config_from, parse_args
from nodeagent.agent import Agent, AgentExit, Backoff
from nodeagent.config import AgentConfig, ConfigError
from nodeagent.portal_client import PortalClient
from nodeagent.probe.simulated import SimulatedProbe, load_fleet
from nodeagent.protocol import PROTOCOL_VERSION
from nodeagent.runtime.simulated_runtime import SimulatedRuntime

DEMO_FLEET = Path(nodeagent.__file__).parent / "fleets" / "demo.yaml"
REGISTERED = {"node_id": 7, "heartbeat_interval_s": 5, "poll_interval_s": 1}


class TinyPortal:
    """The agent API in memory, behind an httpx MockTransport."""

    def __init__(self, desired: list[dict[str, Any]] | None = None) -> None:
        self.requests: list[tuple[str, str, str | None, Any]] = []
        self.desired = desired or []
        self.protocol_ok = True
        self.refusal: dict[str, Any] | None = None  # a 400 answer to registrations

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else None
        auth = request.headers.get("Authorization")
        path = request.url.path.removeprefix("/api/agent/v1/")
        self.requests.append((request.method, path, auth, body))
        if path == "register/":
            if not self.protocol_ok:
                return httpx.Response(409, json={"detail": "protocol 1 not supported"})
            if self.refusal is not None:
                return httpx.Response(400, json=self.refusal)
            if body.get("join_token") == "join-1":
                return httpx.Response(201, json={**REGISTERED, "node_token": "node-secret"})
            if auth == "Node node-secret":
                return httpx.Response(200, json=REGISTERED)
            return httpx.Response(401, json={"detail": "bad token"})
        if auth != "Node node-secret":
            return httpx.Response(401, json={"detail": "bad token"})
        if path == "desired/":
            return httpx.Response(200, json={"sessions": self.desired})
        if path == "heartbeat/":
            return httpx.Response(200, json={"ok": True, "server_time": "2025-01-01T00:00:00Z"})
        if path == "reports/":
            results = [
                {"session_id": r["session_id"], "outcome": "applied", "state": r["state"]}
                for r in body["reports"]
            ]
            return httpx.Response(200, json={"results": results})
        return httpx.Response(200, json={"state": body["state"]})

    def bodies(self, path: str) -> list[Any]:
        return [body for _, p, _, body in self.requests if p == path]

    def reported(self, session_id: int) -> list[str]:
        """The states reported for a session, batched or one by one, in order."""
        states = []
        for _, path, _, body in self.requests:
            if path == f"sessions/{session_id}/report/":
                states.append(body["state"])
            elif path == "reports/":
                states += [r["state"] for r in body["reports"] if r["session_id"] == session_id]
        return states


def make_agent(portal: TinyPortal, tmp_path: Path, **config: Any) -> Agent:
    settings = AgentConfig(
        node_name="gpu-a01", state_dir=tmp_path, fleet_file=DEMO_FLEET, runtime="simulated",
        join_token="join-1", poll_interval_s=0.01,
    )  # fmt: skip
    settings = replace(settings, **config)
    client = PortalClient("http://portal.test", transport=httpx.MockTransport(portal))
    probe = SimulatedProbe(load_fleet(DEMO_FLEET).node("gpu-a01"))
    runtime = SimulatedRuntime(node_name="gpu-a01", start_delay_s=0.0)
    return Agent(settings, client=client, probe=probe, runtime=runtime)


def test_first_start_uses_the_join_token_and_later_starts_the_stored_credential(
    tmp_path: Path,
) -> None:
    portal = TinyPortal()
    make_agent(portal, tmp_path).register()
    make_agent(portal, tmp_path, join_token=None).register()

    first, second = portal.requests
    assert first[3]["join_token"] == "join-1" and first[2] is None
    assert "join_token" not in second[3] and second[2] == "Node node-secret"
    stored = tmp_path / "node-gpu-a01.json"
    assert stored.stat().st_mode & 0o777 == 0o600
    registration = first[3]
    assert registration["protocol_version"] == PROTOCOL_VERSION
    assert registration["hostname"] == "gpu-a01" and registration["address"] == "127.0.0.1"
    assert registration["runtime"] == "simulated"
    assert registration["labels"]["cooling"] == "liquid"
    assert len(registration["gpus"]) == 8 and registration["gpus"][0]["simulated"] is True


def test_protocol_mismatch_exits_with_a_clear_message(tmp_path: Path) -> None:
    portal = TinyPortal()
    portal.protocol_ok = False
    with pytest.raises(AgentExit, match="protocol version") as caught:
        make_agent(portal, tmp_path).register()
    assert caught.value.exit_code == 2


def test_no_credential_and_no_join_token_says_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(AgentExit, match="join token"):
        make_agent(TinyPortal(), tmp_path, join_token=None).register()


def test_one_round_starts_desired_desktops_and_sends_a_heartbeat(tmp_path: Path) -> None:
    gpu = SimulatedProbe(load_fleet(DEMO_FLEET).node("gpu-a01")).inventory()[0]
    mig = gpu.mig_instances[0].uuid
    portal = TinyPortal(desired=[{
        "session_id": 21, "user": "bob", "course": "", "image": "deskpool/tiny:latest",
        "cpus": 1, "memory_mb": 512, "pids_limit": 256, "shm_mb": 64, "gpu_devices": [mig],
        "vnc_password": "pw", "home_volume": "home-bob",
    }])  # fmt: skip
    agent = make_agent(portal, tmp_path)

    agent.run(once=True)
    agent.heartbeat()  # a second heartbeat sees the desktop started during the round

    assert portal.reported(21) == ["STARTING", "RUNNING"]
    assert not portal.bodies("sessions/21/report/")  # batched: POST reports/
    heartbeat = portal.bodies("heartbeat/")[-1]
    assert heartbeat["running_sessions"] == [21]
    metrics = {m["uuid"]: m for m in heartbeat["gpus"]}
    assert metrics[gpu.uuid]["utilization_pct"] > 20  # the session's GPU is busy


def test_a_registration_the_portal_refuses_exits_saying_why(tmp_path: Path) -> None:
    portal = TinyPortal()
    portal.refusal = {
        "detail": "Invalid Registration: gpus.0.hbm_gb: Extra inputs are not permitted",
        "errors": [{"field": "gpus.0.hbm_gb", "message": "Extra inputs are not permitted",
                    "type": "extra_forbidden"}],
    }  # fmt: skip
    with pytest.raises(AgentExit, match="gpus.0.hbm_gb: Extra inputs") as caught:
        make_agent(portal, tmp_path).register()
    assert caught.value.exit_code == 2


def test_a_desired_answer_the_agent_cannot_read_leaves_desktops_alone(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    portal = TinyPortal(desired=[{  # no "user"
        "session_id": 21, "course": "", "image": "deskpool/tiny:latest", "cpus": 1,
        "memory_mb": 512, "pids_limit": 256, "shm_mb": 64, "gpu_devices": [],
        "vnc_password": "pw", "home_volume": "home-bob",
    }])  # fmt: skip
    agent = make_agent(portal, tmp_path)
    with caplog.at_level(logging.INFO, logger="nodeagent"):
        agent.run(once=True)
    assert portal.bodies("sessions/21/report/") == []  # nothing started, nothing stopped
    assert agent.runtime.list_managed() == []
    [error] = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert "not a valid DesiredState" in error.getMessage()
    assert "sessions.0.user: Field required" in error.getMessage()
    assert error.exc_info is None  # a sentence, not a traceback


def test_backoff_grows_and_is_capped() -> None:
    backoff = Backoff(base_s=1.0, cap_s=8.0)
    delays = [backoff.next_delay() for _ in range(6)]
    assert 0.5 <= delays[0] <= 1.0
    assert 4.0 <= delays[3] <= 8.0
    assert all(d <= 8.0 for d in delays)
    backoff.reset()
    assert backoff.next_delay() <= 1.0


def test_environment_is_read_and_flags_win(tmp_path: Path) -> None:
    env = {
        "DESKPOOL_PORTAL_URL": "http://portal:8000/", "DESKPOOL_JOIN_TOKEN": "j",
        "DESKPOOL_NODE_NAME": "gpu-x", "DESKPOOL_STATE_DIR": str(tmp_path),
        "DESKPOOL_FLEET_FILE": "fleet.yaml", "DESKPOOL_RUNTIME": "Simulated",
        "DESKPOOL_PUBLISH_ADDRESS": "10.0.0.5", "DESKPOOL_POLL_INTERVAL": "2.5",
        "DESKPOOL_LABELS": "rack=r9, cooling=air",
    }  # fmt: skip
    config = AgentConfig.from_env(env)
    assert config.portal_url == "http://portal:8000"
    assert (config.node_name, config.runtime, config.poll_interval_s) == ("gpu-x", "simulated", 2.5)
    assert config.fleet_file == Path("fleet.yaml") and config.publish_address == "10.0.0.5"
    assert config.labels == {"rack": "r9", "cooling": "air"}
    assert AgentConfig.from_env({}).runtime == "auto"
    with pytest.raises(ConfigError, match="DESKPOOL_RUNTIME"):
        AgentConfig.from_env({"DESKPOOL_RUNTIME": "podman"})


def test_cli_flags_override_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DESKPOOL_NODE_NAME", "from-env")
    monkeypatch.setenv("DESKPOOL_FLEET_FILE", "env.yaml")
    config = config_from(parse_args(["--fleet", "cli.yaml", "--node", "gpu-t01", "--once"]))
    assert (config.node_name, config.fleet_file) == ("gpu-t01", Path("cli.yaml"))


def test_heartbeats_keep_their_interval_however_often_the_waits_are_answered(
    tmp_path: Path,
) -> None:
    from nodeagent.agent import PortalFollower
    from nodeagent.protocol import RegistrationAnswer

    agent = make_agent(TinyPortal(), tmp_path)
    answer = RegistrationAnswer(node_id=7, heartbeat_interval_s=25, poll_interval_s=1, wait_s=25)
    follower = PortalFollower(agent, answer, poll_s=1)
    assert follower._heartbeat_due() is not None  # the first one: at once
    # Waits answered at once, one after another (a class starting): no heartbeat goes with
    # them until the interval has passed...
    assert [follower._heartbeat_due() for _ in range(20)] == [None] * 20
    # ...and each wait ends by the time the next one falls due (20-25 s from now), so that
    # the wait after it carries it in time.
    lengths = [follower._wait_length() for _ in range(20)]
    assert all(
        0.5 <= length <= follower.next_heartbeat - time.monotonic() + 0.01 for length in lengths
    )
    follower.next_heartbeat = time.monotonic() + 3
    assert follower._wait_length() <= 3
    assert follower._heartbeat_due() is None
    follower.next_heartbeat = time.monotonic() + 0.2  # within the slack: due now
    assert follower._heartbeat_due() is not None
    assert follower.next_heartbeat - time.monotonic() >= 0.8 * 25 - 0.1
