"""From a submitted request to a real desktop container and back, with every real part.

A real Celery worker on the real Redis broker schedules; a real agent process starts a
real container from the tiny test image; the session reaches RUNNING; it is stopped; the
container is gone and the allocation released.
"""

from __future__ import annotations

import httpx
import pytest
from django.contrib.auth.models import User

from scheduling.models import Allocation, AuditEvent, Session
from scheduling.services.nodes import do_create_join_token

from ..conftest import TEST_IMAGE, give_thesis_grant
from .stack import wait_for, write_fleet

pytestmark = [pytest.mark.integration, pytest.mark.docker]


def api_client(stack, username: str) -> httpx.Client:
    """A thesis student's API client (their sessions ask as thesis: the top tier)."""
    give_thesis_grant(User.objects.get(username=username))
    client = httpx.Client(base_url=stack.url, timeout=10)
    token = client.post(
        "/api/v1/auth/token/", json={"username": username, "password": "pw-" + username}
    ).json()["token"]
    client.headers["Authorization"] = f"Token {token}"
    return client


def test_submitted_session_runs_in_a_real_container_and_stops_cleanly(
    stack, owner, profile, docker_engine, require_image, tmp_path
):
    require_image(TEST_IMAGE)
    stack.start_agent(
        do_create_join_token(stack.node, actor="test"),
        write_fleet(tmp_path / "fleet.yaml", stack.node, 2),
    )
    client = api_client(stack, "ada")
    wait_for(lambda: client.get("/api/v1/profiles/").status_code == 200, 10, "the API")

    created = client.post("/api/v1/sessions/", json={"profile": profile.pk, "purpose": "thesis"})
    assert created.status_code == 201, created.text
    session_id = created.json()["id"]

    seen: list[str] = []

    def running():
        body = client.get(f"/api/v1/sessions/{session_id}/").json()
        if not seen or seen[-1] != body["state"]:
            seen.append(body["state"])
        assert body["state"] not in ("FAILED", "LOST"), body
        return body if body["state"] == "RUNNING" else None

    body = wait_for(running, 60, "RUNNING")
    assert seen[0] == "QUEUED" or seen[0] in ("PLACED", "STARTING", "RUNNING")
    assert body["node"] == stack.node
    assert body["desktop_url"] == f"/desktop/{session_id}/"
    assert body["slice"] == "gpu0 1g.10gb"

    containers = [
        c
        for c in stack.node_containers(docker_engine, all_states=False)
        if c.labels.get("deskpool.session") == str(session_id)
    ]
    assert len(containers) == 1
    container = containers[0]
    assert container.labels["deskpool.user"] == "ada"
    ports = container.attrs["NetworkSettings"]["Ports"]["6080/tcp"]
    assert [p["HostIp"] for p in ports] == ["127.0.0.1"]
    assert not any("passw" in e.lower() for e in container.attrs["Config"]["Env"] or [])
    assert Allocation.objects.filter(session_id=session_id, released_at=None).count() == 1

    stopped = client.post(f"/api/v1/sessions/{session_id}/stop/")
    assert stopped.status_code == 200
    wait_for(
        lambda: client.get(f"/api/v1/sessions/{session_id}/").json()["state"] == "ENDED",
        30,
        "ENDED",
    )
    wait_for(
        lambda: (
            not any(
                c.labels.get("deskpool.session") == str(session_id)
                for c in stack.node_containers(docker_engine)
            )
        ),
        20,
        "the container to be removed",
    )
    assert not Allocation.objects.filter(session_id=session_id, released_at=None).exists()
    volume = docker_engine.volumes.get(Session.objects.get(pk=session_id).home_volume)
    assert volume is not None  # the home volume stays
    transitions = list(
        AuditEvent.objects.filter(session_id=session_id, kind="session.transition").values_list(
            "data__to", flat=True
        )
    )
    # STARTING only when the agent's STARTING went out before its RUNNING; in one batch
    # PLACED goes straight to RUNNING (services.agent_sessions.do_report_batch).
    assert [t for t in transitions if t != "STARTING"] == ["PLACED", "RUNNING", "STOPPING", "ENDED"]
    assert transitions.count("STARTING") <= 1 and transitions[0] == "PLACED"
    volume.remove(force=True)
