"""The agents' long-poll ``POST /api/agent/v1/wait/`` (portal.agents.wait), in process
through its ASGI application, on the real Redis and PostgreSQL.

A wait is answered at once when the agent's version is old, holds while nothing changes, and
is answered as soon as a commit changes what the node should run (a session placed there);
its heartbeat is recorded; bad requests get the agent API's errors.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.testing import HttpCommunicator
from django.conf import settings
from django.db import connection

from portal.agents.wait import PATH
from portal.asgi import application
from scheduling.models import Node
from scheduling.services.agent_wake import desired_version
from scheduling.services.cycle import do_scheduling_cycle
from scheduling.services.sessions import check_submit, do_submit

from ...conftest import give_thesis_grant

pytestmark = [pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def _real_redis():
    if settings.EMBEDDED:
        pytest.skip("the wait is tested on the real Redis: set REDIS_URL")


def wait_request(token: str | None, body: object, method: str = "POST") -> HttpCommunicator:
    headers = [(b"content-type", b"application/json")]
    if token is not None:
        headers.append((b"authorization", f"Node {token}".encode()))
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return HttpCommunicator(application, method, PATH, body=raw, headers=headers)


async def answer(communicator: HttpCommunicator, timeout: float) -> tuple[int, dict, dict]:
    response = await communicator.get_response(timeout=timeout)
    headers = {k.decode(): v.decode() for k, v in response["headers"]}
    return response["status"], headers, json.loads(response["body"])


def heartbeat_of(node: Node) -> dict:
    return {"gpus": [], "running_sessions": []}


def test_an_old_version_is_answered_at_once_with_the_desired_state_and_heartbeat(
    register_node,
):
    node, token = register_node("wait-1", [])
    before = Node.objects.get(pk=node.pk).last_heartbeat

    async def run():
        body = {"since": 10**9, "timeout_s": 30, "heartbeat": heartbeat_of(node)}
        return await answer(wait_request(token, body), timeout=10)

    status, _, body = async_to_sync(run)()
    assert status == 200, body
    assert body == {
        "sessions": [],
        "warm": [],
        "home_tasks": [],
        "version": desired_version(node.pk),
    }
    assert Node.objects.get(pk=node.pk).last_heartbeat != before  # the heartbeat was recorded


def test_a_wait_holds_until_a_placement_on_its_node_commits(register_node, make_user, profile):
    from ...conftest import gpu_inventory

    node, token = register_node("wait-2", [gpu_inventory("GPU-w", 0, mig_slices=2)])
    ada = make_user("ada")
    give_thesis_grant(ada)
    version = desired_version(node.pk)

    async def run():
        # Held: the timeout is far beyond the deadline below, so only a wake-up answers it.
        pending = asyncio.ensure_future(
            answer(wait_request(token, {"since": version, "timeout_s": 60}), timeout=15)
        )
        await asyncio.sleep(0.5)
        assert not pending.done()  # nothing changed yet: still waiting

        def submit_and_place():
            try:
                do_submit(ada, check_submit(ada, profile.pk, "thesis", None))
                do_scheduling_cycle()
            finally:
                connection.close()  # back to the pool, from this thread

        await sync_to_async(submit_and_place, thread_sensitive=False)()
        return await pending

    status, _, body = async_to_sync(run)()
    assert status == 200, body
    assert [s["user"] for s in body["sessions"]] == ["ada"]
    assert body["version"] > version


def test_an_unchanged_node_is_answered_after_its_timeout_with_the_same_version(register_node):
    node, token = register_node("wait-3", [])
    version = desired_version(node.pk)

    async def run():
        return await answer(wait_request(token, {"since": version, "timeout_s": 0.3}), 10)

    status, _, body = async_to_sync(run)()
    assert (status, body["version"], body["sessions"]) == (200, version, [])


@pytest.mark.parametrize(
    ("token", "body", "method", "status", "detail"),
    [
        (None, {"since": 0, "timeout_s": 1}, "POST", 401, "Unknown node token"),
        ("not-a-token", {"since": 0, "timeout_s": 1}, "POST", 401, "Unknown node token"),
        ("good", {"since": -1, "timeout_s": 99}, "POST", 400, "Invalid WaitRequest: since"),
        ("good", {"since": 0, "timeout_s": 1, "extra": 1}, "POST", 400, "extra"),
        ("good", b"[" * 5000, "POST", 400, "Invalid WaitRequest"),
        ("good", b"\xff\xfe", "POST", 400, "Invalid WaitRequest"),
        ("good", {"since": 0, "timeout_s": 1}, "GET", 405, "Use POST"),
    ],
)
def test_bad_waits_get_the_agent_api_errors(register_node, token, body, method, status, detail):
    _, good = register_node("wait-4", [])
    token = good if token == "good" else token

    async def run():
        return await answer(wait_request(token, body, method), timeout=10)

    got, headers, answered = async_to_sync(run)()
    assert got == status, answered
    assert detail in answered["detail"]
    if status == 401:
        assert headers["www-authenticate"] == "Node"


def test_an_agent_that_accepts_it_gets_204_when_nothing_changed_and_the_state_when_it_did(
    register_node,
):
    node, token = register_node("wait-5", [])
    version = desired_version(node.pk)

    async def run(since: int):
        body = {"since": since, "timeout_s": 0.3, "unchanged_ok": True}
        response = await wait_request(token, body).get_response(timeout=10)
        return response["status"], response["body"]

    assert async_to_sync(run)(version) == (204, b"")  # unchanged: nothing to read
    status, body = async_to_sync(run)(version + 1)  # the agent's version is not the node's
    assert status == 200 and json.loads(body)["version"] == version
