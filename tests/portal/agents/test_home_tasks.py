"""The agent API's home-task calls (issue 27) with real node tokens: an upload's bytes, a
download's bytes and report, the refusals (another node's task, one no longer pending, too
large, not octet-stream, a bad report), the audit events and the home's usage; bad input
never leaves a traceback in the log."""

from __future__ import annotations

import logging

import httpx
import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.handlers.wsgi import WSGIHandler
from django.test import override_settings
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
from scheduling.services.home_files import MB, download_of, start_task, task_for

from ...conftest import gpu_inventory

pytestmark = pytest.mark.django_db
OCTET = "application/octet-stream"


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


def content(token: str, task_id: int):  # type: ignore[no-untyped-def]
    return agent(token).get(f"/api/agent/v1/home-tasks/{task_id}/content/")


def put(token: str, task_id: int, data: bytes, content_type: str = OCTET):  # type: ignore[no-untyped-def]
    return agent(token).generic(
        "PUT", f"/api/agent/v1/home-tasks/{task_id}/content/", data, content_type=content_type
    )


def report(token: str, task_id: int, body: object):  # type: ignore[no-untyped-def]
    return agent(token).post(f"/api/agent/v1/home-tasks/{task_id}/report/", body, format="json")


def test_an_upload_reaches_its_node_and_is_audited(nodes, owner, caplog):
    home, token, _, other_token = nodes
    task = start_task(owner, "upload", "", upload=SimpleUploadedFile("a.txt", b"hello"))
    desired = DesiredState.model_validate(agent(token).get("/api/agent/v1/desired/").json())
    assert [(t.id, t.kind, t.path, t.size) for t in desired.home_tasks] == [
        (task.pk, "upload", "a.txt", 5)
    ]
    assert agent(other_token).get("/api/agent/v1/desired/").json()["home_tasks"] == []

    with caplog.at_level(logging.DEBUG):
        assert content(other_token, task.pk).status_code == 404  # another node's task
        DetailAnswer.model_validate(report(other_token, task.pk, {"ok": True}).json())
    got = content(token, task.pk)
    assert got.status_code == 200 and got["Content-Type"] == OCTET
    assert b"".join(got) == b"hello"

    answer = report(token, task.pk, {"ok": True, "used_bytes": 1234})
    assert HomeTaskAnswer.model_validate(answer.json()).state == "DONE"
    event = AuditEvent.objects.get(kind=AuditKind.HOME_UPLOADED)
    assert (event.actor, event.node_id) == ("user:ada", home.pk)
    assert event.data == {"path": "a.txt", "size": 5, "node": "gpu-h", "task": task.pk}
    usage = HomeUsage.objects.get(user=owner)
    assert (usage.used_bytes, usage.node_hostname) == (1234, "gpu-h")

    again = report(token, task.pk, {"ok": True})  # no longer pending
    assert again.status_code == 409
    assert ConflictAnswer.model_validate(again.json()).state == "DONE"
    assert content(token, task.pk).status_code == 409
    assert "Traceback" not in caplog.text


def test_a_download_is_put_then_reported_and_given_to_its_person(nodes, owner):
    home, token, _, other_token = nodes
    task = start_task(owner, "download", "docs/report.pdf")
    early = report(token, task.pk, {"ok": True})  # done without its bytes: refused
    assert early.status_code == 400 and ErrorAnswer.model_validate(early.json()).errors[0].field
    assert put(other_token, task.pk, b"pdf").status_code == 404
    stored = put(token, task.pk, b"%PDF-1.7 ...")
    assert stored.status_code == 200, stored.content
    assert report(token, task.pk, {"ok": True, "used_bytes": 99}).json() == {"state": "DONE"}
    task = task_for(owner, task.pk)
    assert download_of(owner, task) == ("report.pdf", b"%PDF-1.7 ...")
    event = AuditEvent.objects.get(kind=AuditKind.HOME_DOWNLOADED)
    assert event.actor == "user:ada" and event.data["size"] == len(b"%PDF-1.7 ...")
    assert put(token, task.pk, b"more").status_code == 409


@override_settings(HOME_TRANSFER_MAX_MB=1)
def test_a_download_over_the_limit_or_not_octet_stream_is_refused(nodes, owner, caplog):
    _, token, _, _ = nodes
    task = start_task(owner, "download", "big.bin")
    with caplog.at_level(logging.DEBUG):
        too_big = put(token, task.pk, b"x" * (MB + 1))
        assert too_big.status_code == 413
        assert "at most 1048576 bytes" in DetailAnswer.model_validate(too_big.json()).detail
        json = put(token, task.pk, b'{"a": 1}', content_type="application/json")
        assert json.status_code == 415
        DetailAnswer.model_validate(json.json())
        listing = start_task(owner, "list")
        assert put(token, listing.pk, b"x").status_code == 409  # not a download
        assert put(token, 2**63, b"x").status_code == 400
    assert not HomeTask.objects.get(pk=task.pk).size
    assert put(token, task.pk, b"x" * MB).status_code == 200  # exactly the limit
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
    assert AuditEvent.objects.get(kind=AuditKind.HOME_DELETED).data["path"] == "older"


def test_the_calls_need_a_node_token_and_a_task_id_a_task_could_have(nodes, owner):
    _, token, _, _ = nodes
    task = start_task(owner, "list")
    assert APIClient().get(f"/api/agent/v1/home-tasks/{task.pk}/content/").status_code == 401
    assert content(token, 999999).status_code == 404
    big = report(token, 2**63, {"ok": True})
    assert big.status_code == 400 and "task_id" in big.json()["detail"]
    assert Node.objects.count() == 2


def test_the_schema_names_the_home_task_calls() -> None:
    schema = APIClient().get("/api/schema/", HTTP_ACCEPT="application/json").json()
    validate_schema(schema)
    calls = schema["paths"]["/api/agent/v1/home-tasks/{task_id}/content/"]
    assert set(calls["get"]["responses"]["200"]["content"]) == {OCTET}
    assert set(calls["put"]["requestBody"]["content"]) == {OCTET}
    assert set(calls["put"]["responses"]) >= {"200", "404", "409", "413", "415"}
    post = schema["paths"]["/api/agent/v1/home-tasks/{task_id}/report/"]["post"]
    body = post["requestBody"]["content"]["application/json"]["schema"]
    assert body == {"$ref": "#/components/schemas/HomeTaskReport"}
    components = schema["components"]["schemas"]
    assert set(components["HomeTaskReport"]["properties"]) == set(HomeTaskReport.model_fields)
    assert "home_tasks" in components["DesiredState"]["properties"]


@pytest.mark.django_db(transaction=True)  # the agent's threads use their own connections
def test_the_agent_carries_out_the_portals_tasks_over_the_real_api(nodes, owner, tmp_path):
    """The node agent's own runner and client (nodeagent.home_tasks, portal_client) against
    this portal's views (WSGI in process): upload, list, download and delete in a simulated
    home; the page's side sees each outcome."""
    home, token, _, _ = nodes
    client = PortalClient(
        "http://testserver", node_token=token, transport=httpx.WSGITransport(app=WSGIHandler())
    )
    runner = HomeTaskRunner(SimulatedRuntime(node_name="gpu-h", homes_dir=tmp_path), client)

    def carry_out(task: HomeTask) -> HomeTask:
        runner.offer(client.desired().home_tasks)
        runner.wait_idle(60)
        return task_for(owner, task.pk)

    try:
        upload = start_task(owner, "upload", "", upload=SimpleUploadedFile("a.txt", b"hello"))
        assert carry_out(upload).state == "DONE", upload.reason
        listing = carry_out(start_task(owner, "list"))
        assert [(e["name"], e["size"]) for e in listing.entries] == [("a.txt", 5)]
        download = carry_out(start_task(owner, "download", "a.txt"))
        assert download_of(owner, download) == ("a.txt", b"hello")
        missing = carry_out(start_task(owner, "delete", "nothing-here"))
        assert missing.state == "FAILED" and missing.reason
        assert carry_out(start_task(owner, "delete", "a.txt")).state == "DONE"
    finally:
        runner.close()
    assert HomeUsage.objects.get(user=owner).used_bytes == 0
    kinds = AuditEvent.objects.filter(kind__startswith="home.").values_list("kind", flat=True)
    assert sorted(kinds) == ["home.deleted", "home.downloaded", "home.uploaded"]
