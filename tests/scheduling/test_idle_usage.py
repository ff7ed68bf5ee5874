"""The agents' usage reports feed idle detection (issue 15): a heartbeat's per-session GPU and
CPU figures are recorded for the sessions running on that node, and only those; an older
agent's heartbeat (no usage) stays valid; bad figures are a 400."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from scheduling.models import Node, Session, SessionActivity
from scheduling.services.agent_sessions import do_report
from scheduling.services.cycle import do_scheduling_cycle
from scheduling.services.nodes import do_heartbeat
from scheduling.services.sessions import check_submit, do_submit

from ..conftest import gpu_inventory

pytestmark = [pytest.mark.django_db, pytest.mark.lifecycle]

HEARTBEAT = "/api/agent/v1/heartbeat/"


def agent(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Node " + token)
    return client


def running_on(node: Node, user, profile) -> Session:
    session = do_submit(user, check_submit(user, profile.pk, "hobby", None))
    do_scheduling_cycle()
    session.refresh_from_db()
    assert session.node == node
    do_report(node, session.pk, {"state": "RUNNING", "port": 32000})
    return session


def samples(session: Session) -> list[list]:
    row = SessionActivity.objects.filter(session=session).first()
    return [] if row is None else [sample[1:] for sample in row.samples]


def test_a_node_reports_its_own_sessions_usage_and_not_another_nodes(
    owner, stranger, profile, register_node
) -> None:
    first, first_token = register_node("gpu-a01", [gpu_inventory("GPU-a", 0, mig_slices=1)])
    mine = running_on(first, owner, profile)
    second, second_token = register_node("gpu-b01", [gpu_inventory("GPU-b", 0, mig_slices=1)])
    # The first node's only slice is taken: the next session goes to the second node.
    theirs = running_on(second, stranger, profile)

    body = {
        "gpus": [],
        "running_sessions": [mine.pk],
        "usage": [
            {"session_id": mine.pk, "gpu_pct": 87.5, "cpu_pct": 12.25},
            {"session_id": theirs.pk, "gpu_pct": 0, "cpu_pct": 0},  # not this node's
            {"session_id": 999_999, "gpu_pct": 1},  # no such session
        ],
    }
    answer = agent(first_token).post(HEARTBEAT, body, format="json")
    assert answer.status_code == 200, answer.content
    assert samples(mine) == [[87.5, 12.25]]
    assert samples(theirs) == []

    # The owning node's report is recorded; None stays None (no figure).
    answer = agent(second_token).post(
        HEARTBEAT,
        {"gpus": [], "running_sessions": [theirs.pk], "usage": [{"session_id": theirs.pk}]},
        format="json",
    )
    assert answer.status_code == 200, answer.content
    assert samples(theirs) == [[None, None]]
    assert samples(mine) == [[87.5, 12.25]]


def test_an_older_agents_heartbeat_without_usage_records_nothing(
    owner, profile, register_node
) -> None:
    node, token = register_node("gpu-a01", [gpu_inventory("GPU-a", 0, mig_slices=1)])
    session = running_on(node, owner, profile)
    answer = agent(token).post(
        HEARTBEAT, {"gpus": [], "running_sessions": [session.pk]}, format="json"
    )
    assert answer.status_code == 200, answer.content
    do_heartbeat(Node.objects.get(pk=node.pk), {"gpus": [], "running_sessions": [session.pk]})
    assert samples(session) == []


@pytest.mark.parametrize(
    "entry",
    [
        {"session_id": 1, "gpu_pct": 101},
        {"session_id": 1, "cpu_pct": -1},
        {"session_id": 0},
        {"session_id": 1, "gpu_pct": "busy"},
        {"session_id": 1, "memory_pct": 3},
    ],
)
def test_bad_usage_figures_are_a_400(register_node, entry) -> None:
    _, token = register_node("gpu-a01", [gpu_inventory("GPU-a", 0, mig_slices=1)])
    answer = agent(token).post(
        HEARTBEAT, {"gpus": [], "running_sessions": [], "usage": [entry]}, format="json"
    )
    assert answer.status_code == 400, answer.content
    assert answer.json()["errors"][0]["field"].startswith("usage.0")
