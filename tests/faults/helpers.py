"""Small helpers for the fault tests: API clients, sessions, containers of a node."""

from __future__ import annotations

import time

import httpx
from django.contrib.auth.models import User

from nodeagent.readiness import Handshake, vnc_handshake
from scheduling.models import Allocation, Node, Session
from scheduling.services.api_tokens import issue_token

from ..conftest import give_thesis_grant
from ..integration.stack import wait_for


def api_client(stack, username: str) -> httpx.Client:
    """A thesis student's API client (their sessions ask as thesis: the top tier)."""
    give_thesis_grant(User.objects.get(username=username))
    client = httpx.Client(base_url=stack.url, timeout=10)
    answer = client.post(
        "/api/v1/auth/token/", json={"username": username, "password": "pw-" + username}
    )
    assert answer.status_code == 200, answer.text
    client.headers["Authorization"] = f"Token {answer.json()['token']}"
    return client


def token_client(stack, user) -> httpx.Client:
    """An API client with a token made directly (no password hashing per login)."""
    give_thesis_grant(user)
    _, token = issue_token(user, "fault test")
    return httpx.Client(base_url=stack.url, timeout=10, headers={"Authorization": f"Token {token}"})


def submit(client: httpx.Client, profile) -> int:
    created = client.post("/api/v1/sessions/", json={"profile": profile.pk, "purpose": "thesis"})
    assert created.status_code == 201, created.text
    return int(created.json()["id"])


def wait_node_up(hostname: str, timeout: float = 30.0) -> Node:
    return wait_for(
        lambda: Node.objects.filter(hostname=hostname, last_heartbeat__isnull=False).first(),
        timeout,
        f"node {hostname} to register and heartbeat",
    )


def states(ids) -> dict[int, str]:
    return dict(Session.objects.filter(pk__in=list(ids)).values_list("pk", "state"))


def wait_states(ids, state: str, timeout: float) -> None:
    def reached():
        now = states(ids)
        bad = {k: v for k, v in now.items() if v in ("FAILED", "LOST") and v != state}
        reasons = [(s.pk, s.reason) for s in Session.objects.filter(pk__in=list(bad))]
        assert not bad, f"sessions went {bad}: {reasons}"
        return all(v == state for v in now.values()) and len(now) == len(list(ids))

    wait_for(reached, timeout, f"sessions {sorted(ids)} to be {state} (now {states(ids)})")


def session_containers(stack, client, session_id: int, *, node: str | None = None) -> list:
    return [
        c
        for c in stack.node_containers(client, node=node)
        if c.labels.get("deskpool.session") == str(session_id)
    ]


def open_allocations(session_id: int) -> int:
    return Allocation.objects.filter(session_id=session_id, released_at=None).count()


def handshake(session_id: int, timeout: float = 20.0) -> Handshake:
    """A VNC handshake with the desktop the portal has on record for this session."""
    session = Session.objects.get(pk=session_id)
    deadline = time.monotonic() + timeout
    while True:
        try:
            return vnc_handshake(session.desktop_host or "127.0.0.1", session.desktop_port)
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
