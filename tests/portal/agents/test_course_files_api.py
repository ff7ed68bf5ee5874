"""The agent API's course-folder calls (docs/course-files.md) with real node tokens: the
manifest and the bytes go only to a node running a desktop that gets the folder; any other
node, or a request without a token, learns nothing; the agent's client reads both."""

from __future__ import annotations

import hashlib
import logging

import httpx
import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.handlers.wsgi import WSGIHandler
from django.db import transaction
from drf_spectacular.validation import validate_schema
from rest_framework.test import APIClient

from nodeagent.portal_client import PortalClient, PortalError
from nodeagent.protocol import DesiredState, DetailAnswer
from nodeagent.protocol_courses import CourseManifest
from people.models import Course
from scheduling.choices import SessionState
from scheduling.models import Session
from scheduling.services.course_files import check_upload, do_upload
from scheduling.services.teaching import course_role

from ...conftest import gpu_inventory

pytestmark = pytest.mark.django_db
DATA = b"print('hello, class')\n"
SHA = hashlib.sha256(DATA).hexdigest()


@pytest.fixture(autouse=True)
def _store(settings, tmp_path, monkeypatch):  # type: ignore[no-untyped-def]
    settings.COURSE_FILES_ROOT = tmp_path / "course-files"
    monkeypatch.setattr(transaction, "on_commit", lambda run, *args, **kwargs: run())


def agent(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Node " + token)
    return client


@pytest.fixture
def setup(make_user, register_node, profile):  # type: ignore[no-untyped-def]
    """cs101's folder holds hello.py; alice (enrolled) runs on gpu-1, bob (art200) on gpu-2,
    and gpu-3 runs nothing."""
    teacher, alice, bob = make_user("prof"), make_user("alice"), make_user("bob")
    course = Course.objects.create(code="cs101", title="GPUs")
    course.instructors.add(teacher)
    course.students.add(alice)
    Course.objects.create(code="art200", title="Painting").students.add(bob)
    upload = SimpleUploadedFile("hello.py", DATA)
    do_upload(teacher, check_upload(course_role(teacher, course), [upload], "week1"))
    tokens = {}
    for name, user in (("gpu-1", alice), ("gpu-2", bob), ("gpu-3", None)):
        node, token = register_node(name, [gpu_inventory(f"GPU-{name}", 0, mig_slices=1)])
        tokens[name] = token
        if user is not None:
            Session.objects.create(
                user=user, profile=profile, purpose="hobby", state=SessionState.RUNNING,
                node=node, vnc_password="pw345678",
            )  # fmt: skip
    return course, tokens


def test_the_node_of_an_enrolled_students_desktop_gets_the_folder(setup, caplog):
    course, tokens = setup
    desired = DesiredState.model_validate(
        agent(tokens["gpu-1"]).get("/api/agent/v1/desired/").json()
    )
    [session] = desired.sessions
    assert [(r.id, r.code, r.version) for r in session.courses] == [(course.pk, "cs101", 1)]
    manifest = agent(tokens["gpu-1"]).get(f"/api/agent/v1/courses/{course.pk}/manifest/")
    assert manifest.status_code == 200, manifest.content
    listed = CourseManifest.model_validate(manifest.json())
    assert [(f.path, f.size, f.sha256) for f in listed.files] == [("week1/hello.py", 22, SHA)]
    got = agent(tokens["gpu-1"]).get(f"/api/agent/v1/courses/{course.pk}/files/{SHA}/")
    assert got.status_code == 200
    assert got["Content-Type"] == "application/octet-stream"
    assert b"".join(got.streaming_content) == DATA  # type: ignore[attr-defined]

    with caplog.at_level(logging.DEBUG):
        for other in ("gpu-2", "gpu-3"):  # another course's student's node; an idle node
            desired_other = agent(tokens[other]).get("/api/agent/v1/desired/").json()
            assert all("courses" not in s for s in desired_other["sessions"])
            for url in (
                f"/api/agent/v1/courses/{course.pk}/manifest/",
                f"/api/agent/v1/courses/{course.pk}/files/{SHA}/",
            ):
                refused = agent(tokens[other]).get(url)
                assert refused.status_code == 404, url
                DetailAnswer.model_validate(refused.json())
        assert APIClient().get(f"/api/agent/v1/courses/{course.pk}/manifest/").status_code == 401
        # A sha256 the folder does not list, an unknown course, an impossible id.
        unknown = hashlib.sha256(b"other").hexdigest()
        base = "/api/agent/v1/courses"
        assert agent(tokens["gpu-1"]).get(f"{base}/{course.pk}/files/{unknown}/").status_code == 404
        assert agent(tokens["gpu-1"]).get(f"{base}/999999/manifest/").status_code == 404
        assert agent(tokens["gpu-1"]).get(f"{base}/{2**63}/manifest/").status_code == 400
        assert agent(tokens["gpu-1"]).get(f"{base}/{course.pk}/files/NOTASHA/").status_code == 404
    assert "Traceback" not in caplog.text


@pytest.mark.django_db(transaction=True)  # WSGI in process: each request its connection
def test_the_agents_client_reads_the_manifest_and_streams_the_bytes(setup):
    course, tokens = setup
    wsgi = httpx.WSGITransport(app=WSGIHandler())
    client = PortalClient("http://testserver", node_token=tokens["gpu-1"], transport=wsgi)
    assert client.course_manifest(course.pk).files[0].sha256 == SHA
    chunks: list[bytes] = []
    client.course_file(course.pk, SHA, chunks.append)
    assert b"".join(chunks) == DATA
    stranger = PortalClient("http://testserver", node_token=tokens["gpu-3"], transport=wsgi)
    with pytest.raises(PortalError) as refused:
        stranger.course_file(course.pk, SHA, chunks.append)
    assert refused.value.status_code == 404


def test_the_schema_names_the_course_calls():
    schema = APIClient().get("/api/schema/?format=json").json()
    validate_schema(schema)
    paths = schema["paths"]
    assert "/api/agent/v1/courses/{course_id}/manifest/" in paths
    assert any(p.startswith("/api/agent/v1/courses/{course_id}/files/") for p in paths)
