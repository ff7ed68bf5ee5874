"""The agent API's home-task call (issue 27) with real node tokens: a listing's and a
deletion's report, the refusals (another node's task, one no longer pending, an older agent's
upload or download, a bad report), the audit event and the home's usage; bad input never
leaves a traceback in the log."""

from __future__ import annotations

import logging

import httpx
import pytest
from django.core.handlers.wsgi import WSGIHandler
from django.utils import timezone
from drf_spectacular.validation import validate_schema
from rest_framework.test import APIClient

from nodeagent.home_tasks import HomeTaskRunner
from nodeagent.portal_client import PortalClient
from nodeagent.protocol import ConflictAnswer, DesiredState, DetailAnswer, ErrorAnswer
from nodeagent.protocol_files import HomeTaskAnswer, HomeTaskReport
from nodeagent.runtime.simulated_runtime import SimulatedRuntime
from scheduling.choices import AuditKind
from scheduling.models import AuditEvent, HomeTask, HomeUsage, Node, UsageRecord
from scheduling.models.sessions import home_volume_of
from scheduling.services.home_files import start_task, task_for

from ...conftest import gpu_inventory

pytestmark = pytest.mark.django_db


def agent(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Node " + token)
    return client


@pytest.fixture
def nodes(register_node, owner):  # type: ignore[no-untyped-def]
    """Two nodes and their tokens; the person's latest desktop ran on the first."""
    home, home_token = register_node("gpu-h", [gpu_inventory("GPU-h", 0, mig_slices=1)])
    other, other_token = register_node("gpu-o", [gpu_inventory("GPU-o", 0, mig_slices=1)])
    UsageRecord.objects.create(
        user=owner, username=owner.username, purpose="hobby", profile_slug="p",
        node_hostname=home.hostname, started_at=timezone.now(),
    )  # fmt: skip
    return home, home_token, other, other_token


def report(token: str, task_id: int, body: object):  # type: ignore[no-untyped-def]
    return agent(token).post(f"/api/agent/v1/home-tasks/{task_id}/report/", body, format="json")


def test_a_listing_reaches_its_node_and_its_report_is_kept(nodes, owner, caplog):
    home, token, _, other_token = nodes
    task = start_task(owner, "list", "docs")
    desired = DesiredState.model_validate(agent(token).get("/api/agent/v1/desired/").json())
    assert [(t.id, t.kind, t.path) for t in desired.home_tasks] == [(task.pk, "list", "docs")]
    assert agent(other_token).get("/api/agent/v1/desired/").json()["home_tasks"] == []

    with caplog.at_level(logging.DEBUG):
        other = report(other_token, task.pk, {"ok": True})  # another node's task
        assert other.status_code == 404
        DetailAnswer.model_validate(other.json())
    answer = report(token, task.pk, {"ok": True, "used_bytes": 1234})
    assert HomeTaskAnswer.model_validate(answer.json()).state == "DONE"
    usage = HomeUsage.objects.get(user=owner)
    assert (usage.used_bytes, usage.node_hostname) == (1234, "gpu-h")
    assert not AuditEvent.objects.filter(kind__startswith="home.").exists()  # not audited

    again = report(token, task.pk, {"ok": True})  # no longer pending
    assert again.status_code == 409
    assert ConflictAnswer.model_validate(again.json()).state == "DONE"
    assert "Traceback" not in caplog.text


def test_an_older_agents_transfer_calls_are_refused_clearly(nodes, owner, caplog):
    """Uploads and downloads go through the gateway now: the content call is gone (404), and
    a report on an upload or download task (none are left after migration 0027) is a 400
    naming ``kind``, never a 500; such a task is not listed to the node."""
    home, token, _, _ = nodes
    upload = HomeTask.objects.create(user=owner, node=home, kind="upload", path="a.txt")
    with caplog.at_level(logging.DEBUG):
        for method in ("get", "put"):
            gone = getattr(agent(token), method)(f"/api/agent/v1/home-tasks/{upload.pk}/content/")
            assert gone.status_code == 404
        answer = report(token, upload.pk, {"ok": True})
    assert answer.status_code == 400, answer.content
    assert {e.field for e in ErrorAnswer.model_validate(answer.json()).errors} == {"kind"}
    assert "list and delete" in answer.json()["detail"]
    assert agent(token).get("/api/agent/v1/desired/").json()["home_tasks"] == []
    assert HomeTask.objects.get(pk=upload.pk).state == "PENDING"
    assert "Traceback" not in caplog.text


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"ok": "perhaps"}, "ok"),
        ({"ok": False, "reason": "r" * 301}, "reason"),
        ({"ok": True, "entries": [{"name": "", "kind": "file", "modified": "2026-01-01T00:00Z"}]},
         "entries.0.name"),
        ({"ok": True, "used_bytes": -1}, "used_bytes"),
        ({"ok": True, "surprise": 1}, "surprise"),
    ],
)  # fmt: skip
def test_a_bad_report_is_refused_naming_the_field(nodes, owner, caplog, body, field):
    _, token, _, _ = nodes
    task = start_task(owner, "list")
    with caplog.at_level(logging.DEBUG):
        answer = report(token, task.pk, body)
    assert answer.status_code == 400, answer.content
    assert field in {e.field for e in ErrorAnswer.model_validate(answer.json()).errors}
    assert HomeTask.objects.get(pk=task.pk).state == "PENDING"
    assert "Traceback" not in caplog.text


def test_a_listing_and_a_failure_are_kept_for_the_page(nodes, owner):
    _, token, _, _ = nodes
    listing, deletion = start_task(owner, "list", "docs"), start_task(owner, "delete", "old")
    entry = {"name": "a.txt", "kind": "file", "size": 3, "modified": "2026-01-01T00:00:00Z"}
    body = HomeTaskReport.model_validate({"ok": True, "entries": [entry], "truncated": True})
    assert report(token, listing.pk, body.model_dump(mode="json")).status_code == 200
    listing.refresh_from_db()
    assert (listing.state, listing.entries[0]["name"], listing.truncated) == ("DONE", "a.txt", True)
    failed = report(token, deletion.pk, {"ok": False, "reason": "No such file: 'old'."})
    assert failed.json() == {"state": "FAILED"}
    deletion.refresh_from_db()
    assert deletion.reason == "No such file: 'old'." and deletion.finished_at is not None
    assert not AuditEvent.objects.filter(kind=AuditKind.HOME_DELETED).exists()
    done = start_task(owner, "delete", "older")
    assert report(token, done.pk, {"ok": True}).status_code == 200
    event = AuditEvent.objects.get(kind=AuditKind.HOME_DELETED)
    assert (event.actor, event.node_id) == ("user:ada", done.node_id)
    assert event.data == {"path": "older", "node": "gpu-h", "task": done.pk}


def test_the_calls_need_a_node_token_and_a_task_id_a_task_could_have(nodes, owner):
    _, token, _, _ = nodes
    task = start_task(owner, "list")
    anonymous = APIClient().post(f"/api/agent/v1/home-tasks/{task.pk}/report/", {"ok": True})
    assert anonymous.status_code == 401
    assert report(token, 999999, {"ok": True}).status_code == 404
    big = report(token, 2**63, {"ok": True})
    assert big.status_code == 400 and "task_id" in big.json()["detail"]
    assert Node.objects.count() == 2


def test_the_schema_names_the_home_task_calls() -> None:
    schema = APIClient().get("/api/schema/", HTTP_ACCEPT="application/json").json()
    validate_schema(schema)
    assert [path for path in schema["paths"] if "home-tasks" in path] == [
        "/api/agent/v1/home-tasks/{task_id}/report/"
    ]
    post = schema["paths"]["/api/agent/v1/home-tasks/{task_id}/report/"]["post"]
    body = post["requestBody"]["content"]["application/json"]["schema"]
    assert body == {"$ref": "#/components/schemas/HomeTaskReport"}
    components = schema["components"]["schemas"]
    assert set(components["HomeTaskReport"]["properties"]) == set(HomeTaskReport.model_fields)
    assert "home_tasks" in components["DesiredState"]["properties"]


@pytest.mark.django_db(transaction=True)  # the agent's threads use their own connections
def test_the_agent_carries_out_the_portals_tasks_over_the_real_api(nodes, owner, tmp_path):
    """The node agent's own runner and client (nodeagent.home_tasks, portal_client) against
    this portal's views (WSGI in process): list and delete in a simulated home; the page's
    side sees each outcome."""
    home, token, _, _ = nodes
    client = PortalClient(
        "http://testserver", node_token=token, transport=httpx.WSGITransport(app=WSGIHandler())
    )
    runtime = SimulatedRuntime(node_name="gpu-h", homes_dir=tmp_path)
    runner = HomeTaskRunner(runtime, client)
    folder = runtime.home_folder(home_volume_of(owner), create=True)
    assert folder is not None
    (folder / "a.txt").write_bytes(b"hello")  # as the gateway's upload leaves it

    def carry_out(task: HomeTask) -> HomeTask:
        runner.offer(client.desired().home_tasks)
        runner.wait_idle(60)
        return task_for(owner, task.pk)

    try:
        listing = carry_out(start_task(owner, "list"))
        assert listing.state == "DONE", listing.reason
        assert [(e["name"], e["size"]) for e in listing.entries] == [("a.txt", 5)]
        missing = carry_out(start_task(owner, "delete", "nothing-here"))
        assert missing.state == "FAILED" and missing.reason
        assert carry_out(start_task(owner, "delete", "a.txt")).state == "DONE"
    finally:
        runner.close()
    assert HomeUsage.objects.get(user=owner).used_bytes == 0
    kinds = AuditEvent.objects.filter(kind__startswith="home.").values_list("kind", flat=True)
    assert list(kinds) == ["home.deleted"]
