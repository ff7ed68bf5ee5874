"""The user API contract of /api/v1/ (later tests and clients rely on it)."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from scheduling.models import AuditEvent, Session

pytestmark = pytest.mark.django_db


def client_for(user) -> APIClient:
    client = APIClient()
    answer = client.post(
        "/api/v1/auth/token/",
        {"username": user.username, "password": "pw-" + user.username},
        format="json",
    )
    assert answer.status_code == 200, answer.content
    client.credentials(HTTP_AUTHORIZATION="Token " + answer.json()["token"])
    return client


def test_token_login_rejects_a_wrong_password(owner):
    answer = APIClient().post(
        "/api/v1/auth/token/", {"username": "ada", "password": "nope"}, format="json"
    )
    assert answer.status_code == 400


def test_profiles_are_listed_with_their_ids(owner, profile):
    answer = client_for(owner).get("/api/v1/profiles/")
    assert answer.status_code == 200
    assert [(p["id"], p["slug"]) for p in answer.json()] == [(profile.pk, "painting")]


def test_submit_returns_201_and_a_queued_session_with_the_contract_fields(owner, profile):
    answer = client_for(owner).post(
        "/api/v1/sessions/", {"profile": profile.pk, "purpose": "hobby"}, format="json"
    )
    assert answer.status_code == 201, answer.content
    body = answer.json()
    for field in [
        "id",
        "state",
        "purpose",
        "profile",
        "queue_position",
        "reason",
        "node",
        "slice",
        "desktop_url",
        "created_at",
        "started_at",
        "ended_at",
    ]:
        assert field in body
    assert body["state"] == "QUEUED"
    assert body["profile"] == profile.pk
    assert AuditEvent.objects.filter(session_id=body["id"], kind="session.submitted").count() == 1


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"purpose": "hobby"}, "profile"),
        ({"profile": 999999, "purpose": "hobby"}, "profile"),
        ({"profile": "PROFILE", "purpose": "gaming"}, "purpose"),
        ({"profile": "PROFILE", "purpose": "coursework"}, "course"),
        ({"profile": "PROFILE", "purpose": "coursework", "course": "nope"}, "course"),
    ],
)
def test_invalid_submissions_get_400_with_field_errors_and_create_nothing(
    owner, profile, body, field
):
    body = {k: (profile.pk if v == "PROFILE" else v) for k, v in body.items()}
    answer = client_for(owner).post("/api/v1/sessions/", body, format="json")
    assert answer.status_code == 400
    assert field in answer.json()
    assert Session.objects.count() == 0


def test_my_sessions_lists_only_mine(owner, stranger, profile):
    mine = client_for(owner)
    mine.post("/api/v1/sessions/", {"profile": profile.pk, "purpose": "hobby"}, format="json")
    client_for(stranger).post(
        "/api/v1/sessions/", {"profile": profile.pk, "purpose": "thesis"}, format="json"
    )
    listed = mine.get("/api/v1/sessions/").json()
    assert [s["purpose"] for s in listed] == ["hobby"]


def test_stop_cancels_a_queued_session_and_a_second_stop_is_a_conflict(owner, profile):
    client = client_for(owner)
    session_id = client.post(
        "/api/v1/sessions/", {"profile": profile.pk, "purpose": "hobby"}, format="json"
    ).json()["id"]
    first = client.post(f"/api/v1/sessions/{session_id}/stop/")
    assert first.status_code == 200
    assert first.json()["state"] == "CANCELLED"
    second = client.post(f"/api/v1/sessions/{session_id}/stop/")
    assert second.status_code == 409
    assert "already" in second.json()["detail"]


def test_pool_is_for_admins_only(owner, admin_user, pool):
    assert client_for(owner).get("/api/v1/pool/").status_code == 403
    answer = client_for(admin_user).get("/api/v1/pool/")
    assert answer.status_code == 200
    body = answer.json()
    assert body["slices_total"] == 10
    assert body["nodes"][0]["hostname"] == "node-1"
    assert len(body["nodes"][0]["gpus"]) == 3


def test_openapi_schema_is_served(owner):
    answer = client_for(owner).get("/api/schema/", HTTP_ACCEPT="application/json")
    assert answer.status_code == 200
    assert "/api/v1/sessions/{id}/stop/" in answer.json()["paths"]
