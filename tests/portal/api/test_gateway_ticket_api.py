"""``POST /api/v1/sessions/<id>/ticket/`` (issue 34): a page (its session cookie and CSRF
token) or an API token asks for a ticket to the desktop's screen or sound; the answers are
201 with the ticket, or 400/403/404/409 with a sentence in the person's language."""

from __future__ import annotations

import pytest
from django.test import override_settings
from guardian.shortcuts import assign_perm
from rest_framework.test import APIClient

from nodeagent.gateway.tickets import ReplayMemo, check_ticket, key_bytes
from scheduling.choices import SessionState
from scheduling.models import GatewayTicket, Node, Session
from scheduling.services.agent_sessions import desired_state
from scheduling.services.api_tokens import issue_token

from ...conftest import GATEWAY_PORT

pytestmark = pytest.mark.django_db


@pytest.fixture
def desktop(gateway_desktop):  # type: ignore[no-untyped-def]
    return gateway_desktop


def page_of(user) -> APIClient:  # type: ignore[no-untyped-def]
    """A browser signed in to the pages, that checks CSRF as a browser's requests are."""
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(user)
    client.get("/")  # the CSRF cookie
    return client


def ask(client: APIClient, session_id: int, body: object, **headers: str):  # type: ignore[no-untyped-def]
    csrf = client.cookies.get("csrftoken")
    if csrf is not None:
        headers.setdefault("HTTP_X_CSRFTOKEN", csrf.value)
    return client.post(f"/api/v1/sessions/{session_id}/ticket/", body, format="json", **headers)


def test_a_page_gets_a_ticket_its_nodes_gateway_accepts(desktop, owner):
    client = page_of(owner)
    answer = ask(client, desktop.pk, {"purpose": "screen"})

    assert answer.status_code == 201, answer.content
    body = answer.json()
    assert set(body) == {"ticket", "url", "expires_at"}
    assert body["url"] == f"ws://127.0.0.1:{GATEWAY_PORT}/screen"
    access = desired_state(Node.objects.get(pk=desktop.node_id)).gateway
    assert access is not None
    claims = check_ticket(
        body["ticket"],
        keys={k.kid: key_bytes(k.key) for k in access.keys},
        node_id=desktop.node_id,
        purpose="screen",
        memo=ReplayMemo(),
    )
    row = GatewayTicket.objects.get(jti=claims.jti)
    assert row.login_session == client.session.session_key
    assert row.login_session not in answer.content.decode()


def test_a_page_without_the_csrf_token_is_refused(desktop, owner):
    answer = ask(page_of(owner), desktop.pk, {"purpose": "screen"}, HTTP_X_CSRFTOKEN="nope")
    assert answer.status_code == 403
    assert not GatewayTicket.objects.exists()


def test_an_api_token_gets_a_sound_ticket_marked_with_the_token(desktop, owner):
    token, plain = issue_token(owner, "script")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Token " + plain)
    answer = ask(client, desktop.pk, {"purpose": "sound"})
    assert answer.status_code == 201, answer.content
    assert answer.json()["url"].endswith("/sound")
    assert GatewayTicket.objects.get().login_session == f"token:{token.pk}"


def test_an_admin_gets_a_ticket(desktop, admin_user):
    assert ask(page_of(admin_user), desktop.pk, {"purpose": "screen"}).status_code == 201
    assert GatewayTicket.objects.get().via == "admin"


def test_a_stranger_is_answered_404_and_a_viewer_who_may_not_open_it_403(desktop, stranger):
    answer = ask(page_of(stranger), desktop.pk, {"purpose": "screen"})
    assert answer.status_code == 404 and answer.json()["detail"]
    assign_perm("scheduling.view_session", stranger, desktop)
    answer = ask(page_of(stranger), desktop.pk, {"purpose": "screen"})
    assert answer.status_code == 403
    assert answer.json() == {"detail": "Only the desktop's owner and admins may open it."}
    assert not GatewayTicket.objects.exists()


def test_a_desktop_that_does_not_run_is_answered_409(desktop, owner):
    Session.objects.filter(pk=desktop.pk).update(state=SessionState.QUEUED)
    answer = ask(page_of(owner), desktop.pk, {"purpose": "screen"})
    assert answer.status_code == 409
    assert answer.json() == {"detail": "This desktop is not running; open it once it is."}


def test_no_sound_is_a_404_of_its_own_in_the_persons_language(desktop, owner):
    Session.objects.filter(pk=desktop.pk).update(desktop_audio_port=None)
    answer = ask(page_of(owner), desktop.pk, {"purpose": "sound"})
    assert (answer.status_code, answer.json()) == (404, {"detail": "This desktop has no sound."})
    answer = ask(page_of(owner), desktop.pk, {"purpose": "sound"}, HTTP_ACCEPT_LANGUAGE="zh-hans")
    assert answer.status_code == 404
    assert answer.json()["detail"] != "This desktop has no sound."


@pytest.mark.parametrize(
    "body",
    [{}, {"purpose": "files"}, {"purpose": None}, {"purpose": ["screen"]}, [1], "screen"],
)
def test_bad_input_is_a_400_with_a_sentence(desktop, owner, body):
    answer = ask(page_of(owner), desktop.pk, body)
    assert answer.status_code == 400, answer.content
    assert "files" not in answer.content.decode()  # the input is not repeated back
    assert answer.json()


def test_a_body_that_is_not_json_is_refused_without_a_traceback(desktop, owner):
    client = page_of(owner)
    answer = client.post(
        f"/api/v1/sessions/{desktop.pk}/ticket/",
        b"\xff{",
        content_type="application/json",
        HTTP_X_CSRFTOKEN=client.cookies["csrftoken"].value,
    )
    assert answer.status_code == 400
    answer = ask(client, 10**30, {"purpose": "screen"})
    assert answer.status_code == 404


@override_settings(GATEWAY_URL="wss://deskpool.example.edu/gw/{address}/{port}")
def test_the_url_follows_the_gateway_url_setting(desktop, owner):
    answer = ask(page_of(owner), desktop.pk, {"purpose": "screen"})
    assert answer.json()["url"] == f"wss://deskpool.example.edu/gw/127.0.0.1/{GATEWAY_PORT}/screen"


def test_the_schema_documents_the_ticket_action(owner):
    client = APIClient()
    client.force_login(owner)
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/json").json()
    operation = schema["paths"]["/api/v1/sessions/{id}/ticket/"]["post"]
    assert {"201", "400", "403", "404", "409"} <= set(operation["responses"])


def test_a_file_ticket_names_one_path_and_the_owners_quota(desktop, owner, settings):
    settings.HOME_QUOTA_MB = 5
    client = page_of(owner)
    answer = ask(client, desktop.pk, {"purpose": "upload", "path": "docs/报告.txt", "size": 10})
    assert answer.status_code == 201, answer.content
    assert answer.json()["url"] == f"http://127.0.0.1:{GATEWAY_PORT}/files/upload"
    access = desired_state(Node.objects.get(pk=desktop.node_id)).gateway
    assert access is not None
    claims = check_ticket(
        answer.json()["ticket"],
        keys={k.kid: key_bytes(k.key) for k in access.keys},
        node_id=desktop.node_id,
        purpose="upload",
        memo=ReplayMemo(),
    )
    assert (claims.path, claims.quota) == ("docs/报告.txt", 5 * 1024 * 1024)
    bad = ask(client, desktop.pk, {"purpose": "download", "path": "../etc/passwd"})
    assert bad.status_code == 400 and "cannot be used" in bad.content.decode()
    too_big = ask(client, desktop.pk, {"purpose": "upload", "path": "a.bin", "size": 6 * 2**20})
    assert too_big.status_code == 400 and "no room" in too_big.content.decode()
