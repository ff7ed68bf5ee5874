"""Bad input is a clear 400 or 404, never a 500 and never a traceback in the log (issue 14,
finding 6): deeply nested JSON, oversized ids, non-ASCII digits in a form field, an encoded
path under /static/, an invalid WebSocket frame.

The pages, the user API and the agent API are driven through Django's test client (its
whole middleware stack); the agents' long-poll, /static/ and the WebSockets through the
portal's ASGI application (``portal.asgi.application``), as daphne runs them. Each test
captures the log and fails on any ERROR record that carries an exception.
"""

from __future__ import annotations

import http.client
import json
import logging

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from channels.testing import HttpCommunicator, WebsocketCommunicator
from django import forms
from django.contrib import admin
from django.test import Client
from django.urls import get_resolver

from people.models import Course
from portal.asgi import application
from portal.kit.form_fields import AsciiFloatField, AsciiIntegerField
from scheduling.events import course_group, user_group
from scheduling.models import DesktopProfile, Gpu, JoinToken, Node, Quota, Session
from scheduling.services.nodes import do_create_join_token
from tests.conftest import gpu_inventory, registration

HUGE = "99999999999999999999"  # over any integer column
DEEP = 20_000  # levels of nesting: far past Python's recursion limit
NON_ASCII = ["١٢", "１２", "٩" * 25]  # Arabic-Indic, full-width, and an oversized one


@pytest.fixture(autouse=True)
def no_tracebacks(caplog):
    """Fail a test that left an ERROR record with an exception in the log."""
    caplog.set_level(logging.WARNING)
    yield
    tracebacks = [
        f"{r.name}: {r.getMessage()}" for r in caplog.records if r.levelno >= logging.ERROR
    ]
    assert not tracebacks, tracebacks


def nested(levels: int, kind: str) -> str:
    return "[" * levels + "]" * levels if kind == "list" else '{"a":' * levels + "1" + "}" * levels


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def agent_headers(node_token: str) -> dict[str, str]:
    return {"HTTP_AUTHORIZATION": f"Node {node_token}"}


# --- Deeply nested JSON: every JSON endpoint, signed in or not ----------------------------

JSON_ENDPOINTS = [
    ("/api/v1/auth/token/", None),
    ("/api/v1/sessions/", "student"),
    ("/api/v1/bookings/", "student"),
    ("/api/v1/quota-requests/", "student"),
    ("/api/agent/v1/register/", None),
    ("/api/agent/v1/heartbeat/", "node"),
    ("/api/agent/v1/reports/", "node"),
    ("/api/agent/v1/sessions/1/report/", "node"),
]


@pytest.mark.django_db
@pytest.mark.parametrize("kind", ["list", "object"])
@pytest.mark.parametrize(("url", "who"), JSON_ENDPOINTS)
def test_deeply_nested_json_is_a_400(url, who, kind, owner, register_node):
    client, headers = Client(), {}
    if who == "student":
        client = signed_in(owner)
    elif who == "node":
        _node, token = register_node("node-9", [])
        headers = agent_headers(token)
    answer = client.post(url, nested(DEEP, kind), content_type="application/json", **headers)
    assert answer.status_code == 400, answer.content[:300]
    assert "nested" in answer.json()["detail"]


@pytest.mark.django_db
@pytest.mark.parametrize(
    "content_type", ["application/*", "*/*", "Application/JSON; charset=utf-8", "text/json"]
)
def test_deeply_nested_json_under_another_content_type_is_a_400_or_415(content_type):
    answer = Client().post("/api/v1/auth/token/", nested(DEEP, "list"), content_type=content_type)
    assert answer.status_code in (400, 415), answer.content[:300]


@pytest.mark.django_db
def test_json_nested_within_the_bound_still_reaches_the_view(owner):
    body = json.dumps({"profile": [[[[1]]]], "purpose": "hobby"})
    answer = signed_in(owner).post("/api/v1/sessions/", body, content_type="application/json")
    assert answer.status_code == 400
    assert "profile" in answer.json()  # the serializer's own field error, not the bound's


def asgi_http(path: str, method: str = "GET", body: bytes = b"", headers=()) -> dict:
    """One request to the portal's ASGI application; its status and whole body."""

    async def call() -> dict:
        communicator = HttpCommunicator(application, method, "/", body=body, headers=headers)
        communicator.scope["path"] = path  # as daphne gives it: percent-decoded
        communicator.scope["raw_path"] = path.encode("latin-1", "replace")
        await communicator.send_input({"type": "http.request", "body": body})
        start = await communicator.receive_output(10)
        chunks = []
        while True:
            message = await communicator.receive_output(10)
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        await communicator.wait()
        return {"status": start["status"], "body": b"".join(chunks)}

    return async_to_sync(call)()


@pytest.mark.django_db(transaction=True)
def test_deeply_nested_json_to_the_agents_wait_is_a_400(register_node):
    _node, token = register_node("node-9", [])
    headers = [(b"content-type", b"application/json"), (b"authorization", f"Node {token}".encode())]
    for kind in ("list", "object"):
        answer = asgi_http("/api/agent/v1/wait/", "POST", nested(DEEP, kind).encode(), headers)
        assert answer["status"] == 400, answer["body"][:300]


# --- Oversized ids: in URLs and in JSON fields ------------------------------------------

PAGES_WITH_IDS = [
    ("get", f"/sessions/{HUGE}/"),
    ("post", f"/sessions/{HUGE}/stop/"),
    ("post", f"/sessions/{HUGE}/cancel/"),
    ("get", f"/desktop/{HUGE}/"),
    ("get", f"/console/profiles/{HUGE}/"),
    ("post", f"/console/quotas/{HUGE}/delete/"),
    ("post", f"/console/pool/tokens/{HUGE}/revoke/"),
    ("get", f"/console/alerts/rules/{HUGE}/"),
    ("get", f"/admin/scheduling/session/{HUGE}/change/"),
    ("get", f"/admin/scheduling/desktopprofile/{HUGE}/change/"),
    ("get", f"/api/v1/sessions/{HUGE}/"),
    ("post", f"/api/v1/sessions/{HUGE}/stop/"),
    ("get", f"/api/v1/profiles/{HUGE}/"),
    ("post", f"/api/v1/bookings/{HUGE}/cancel/"),
    ("get", f"/api/v1/alerts/{HUGE}/"),
]


@pytest.mark.django_db
@pytest.mark.parametrize(("method", "url"), PAGES_WITH_IDS)
def test_an_oversized_id_in_a_url_is_a_404(method, url, admin_user):
    client = Client()
    client.force_login(admin_user)
    answer = getattr(client, method)(url)
    # The admin sends an unknown object back to its list with a message (302).
    assert answer.status_code in (404, 302), answer.content[:300]


@pytest.mark.django_db
def test_an_oversized_session_id_in_an_agent_report_is_a_404(register_node):
    _node, token = register_node("node-9", [])
    body = {"state": "RUNNING", "desktop_port": 6080}
    answer = Client().post(
        f"/api/agent/v1/sessions/{HUGE}/report/",
        body,
        content_type="application/json",
        **agent_headers(token),
    )
    assert answer.status_code in (400, 404), answer.content[:300]


@pytest.mark.django_db
def test_an_oversized_session_id_in_a_report_batch_is_answered_not_yours(register_node):
    _node, token = register_node("node-9", [])
    report = {"session_id": int(HUGE), "state": "RUNNING", "desktop_port": 6080}
    answer = Client().post(
        "/api/agent/v1/reports/",
        {"reports": [report]},
        content_type="application/json",
        **agent_headers(token),
    )
    assert answer.status_code in (200, 400), answer.content[:300]
    if answer.status_code == 200:  # each report's own result: refused, not applied
        assert answer.json()["results"][0]["outcome"] == "refused"


@pytest.mark.django_db
def test_oversized_numbers_in_api_json_fields_are_a_400(owner, profile):
    client = signed_in(owner)
    post = {"content_type": "application/json"}
    answer = client.post("/api/v1/sessions/", {"profile": int(HUGE), "purpose": "hobby"}, **post)
    assert answer.status_code == 400, answer.content[:300]
    booking = {"course": "cs101", "profile": int(HUGE), "seats": int(HUGE)}
    booking |= {"starts_at": "2030-01-01T10:00:00Z", "ends_at": "2030-01-01T12:00:00Z"}
    assert client.post("/api/v1/bookings/", booking, **post).status_code in (400, 403, 404)


@pytest.mark.django_db
def test_oversized_numbers_in_a_registration_are_a_400_and_change_nothing(register_node):
    body = registration("node-big", [gpu_inventory("GPU-big", 0, mig_slices=1)])
    body["join_token"] = do_create_join_token("node-big", actor="test")
    for field, where in (("cpu_count", body), ("memory_mb", body["gpus"][0])):
        bad = json.loads(json.dumps(body))
        (bad if where is body else bad["gpus"][0])[field] = int(HUGE)
        answer = Client().post("/api/agent/v1/register/", bad, content_type="application/json")
        assert answer.status_code == 400, (field, answer.content[:300])
        assert "errors" in answer.json()
    assert not Node.objects.filter(hostname="node-big").exists()
    assert not Gpu.objects.filter(uuid="GPU-big").exists()


# --- Non-ASCII digits in a form field: the pages, the console, the admin -----------------


def form_cases(profile) -> list[tuple[str, dict[str, str], str]]:
    """(url, a valid form's fields, the integer field to spoil)"""
    new_profile = {
        "slug": "terminal",
        "name": "Terminal",
        "image": "deskpool/tiny:latest",
        "cpus": "1",
        "memory_mb": "1024",
        "gpu_count": "0",
        "gpu_memory_min_mb": "0",
        "max_duration_minutes": "120",
        "active": "on",
    }
    quota = {"scope": "user", "key": "root", "max_sessions": "2"}
    admin_profile = {
        **{k: v for k, v in new_profile.items() if k != "active"},
        "slug": "terminal2",
        "name": "Terminal 2",
        "compute_min": "0",
        "pids_limit": "256",
        "shm_mb": "64",
        "allowed_kinds": "[]",
        "gpu_models": "[]",
    }
    return [
        ("/sessions/new/", {"profile": str(profile.pk), "purpose": "hobby"}, "profile"),
        ("/console/profiles/", new_profile, "memory_mb"),
        ("/console/profiles/", new_profile, "max_duration_minutes"),
        ("/console/quotas/", quota, "max_sessions"),
        ("/console/pool/tokens/", {"hostname": "node-x", "hours": "24"}, "hours"),
        ("/admin/scheduling/desktopprofile/add/", admin_profile, "memory_mb"),
    ]


@pytest.mark.django_db
@pytest.mark.parametrize("digits", NON_ASCII)
@pytest.mark.parametrize("case", range(6))
def test_non_ascii_digits_in_a_form_field_are_refused(case, digits, admin_user, profile):
    url, fields, spoiled = form_cases(profile)[case]
    client = Client()
    client.force_login(admin_user)
    profiles, quotas = DesktopProfile.objects.count(), Quota.objects.count()
    tokens, sessions = JoinToken.objects.count(), Session.objects.count()
    answer = client.post(url, {**fields, spoiled: digits})
    assert answer.status_code in (200, 400), answer.content[:300]  # the form again, with errors
    assert DesktopProfile.objects.count() == profiles and Quota.objects.count() == quotas
    assert JoinToken.objects.count() == tokens and Session.objects.count() == sessions


@pytest.mark.django_db
def test_ascii_digits_in_the_same_form_fields_are_taken(admin_user, profile):
    client = Client()
    client.force_login(admin_user)
    for url, fields in {url: fields for url, fields, _spoiled in form_cases(profile)}.items():
        answer = client.post(url, fields)
        assert answer.status_code in (200, 302), (url, answer.content[:300])  # done, or shown
    assert DesktopProfile.objects.filter(slug__in=["terminal", "terminal2"]).count() == 2
    assert Quota.objects.filter(key="root").exists() and JoinToken.objects.exists()
    assert Session.objects.filter(user=admin_user).exists()


def all_subclasses(cls: type) -> list[type]:
    found = []
    for sub in cls.__subclasses__():
        found += [sub, *all_subclasses(sub)]
    return found


@pytest.mark.django_db
def test_every_number_field_of_every_form_and_admin_takes_ascii_digits_only(rf, admin_user):
    """The bound holds beyond the forms tested above: every form class of the portal, and
    every model form the admin builds."""
    get_resolver().url_patterns  # noqa: B018 - imports every view, so every form class
    ascii_fields = (AsciiIntegerField, AsciiFloatField)
    wrong = []
    form_classes = [
        form
        for form in all_subclasses(forms.BaseForm)
        if form.__module__.startswith(("portal.", "scheduling."))
        and not form.__module__.startswith("portal.admin.")  # the admin's: through get_form below
    ]
    assert len(form_classes) > 10
    for form in form_classes:
        for name, field in form.base_fields.items():
            if isinstance(field, forms.IntegerField) and not isinstance(field, ascii_fields):
                wrong.append(f"{form.__module__}.{form.__name__}.{name}")
    request = rf.get("/admin/")
    request.user = admin_user
    for model, model_admin in admin.site._registry.items():
        if not model.__module__.startswith("scheduling."):
            continue
        for name, field in model_admin.get_form(request)().fields.items():
            if isinstance(field, forms.IntegerField) and not isinstance(field, ascii_fields):
                wrong.append(f"admin {model.__name__}.{name}")
    assert not wrong, wrong


@pytest.mark.django_db
def test_non_ascii_digits_in_a_search_field_are_a_400(admin_user):
    client = Client()
    client.force_login(admin_user)
    assert client.get("/console/audit/", {"session": "١٢"}).status_code == 400
    assert client.get("/console/audit/", {"node": HUGE}).status_code == 400


# --- An encoded path under /static/ -------------------------------------------------------

STATIC_PATHS = [
    "/static/../../etc/passwd",  # %2e%2e/%2e%2e/etc/passwd, as daphne decodes it
    "/static/deskpool/../../../etc/passwd",
    "/static/..",
    "/static/../",  # ..%2f
    "/static/\x00",  # %00
    "/static/deskpool/session.js\x00.png",
    "/static/..\\..\\etc\\passwd",
    "/static/" + "a" * 5000,
]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("path", STATIC_PATHS)
def test_an_encoded_path_under_static_is_a_404(path):
    answer = asgi_http(path)
    assert answer["status"] == 404, answer
    assert b"root:" not in answer["body"]


@pytest.mark.django_db(transaction=True)
def test_a_static_file_is_still_served():
    answer = asgi_http("/static/deskpool/session.js")
    assert answer["status"] == 200
    assert b"function" in answer["body"]


RAW_STATIC_PATHS = [
    "/static/%2e%2e/%2e%2e/etc/passwd",
    "/static/..%2f..%2fetc/passwd",
    "/static/..%2f",
    "/static/%00",
    "/static/deskpool/session.js%00.png",
    "/static/%2e%2e%5c%2e%2e%5cetc%5cpasswd",
]


@pytest.mark.integration
def test_encoded_paths_under_static_are_404s_from_a_real_daphne(daphne_portal):
    """The same paths as they come over the wire, percent-encoded, to a real daphne; its
    log holds no traceback afterwards."""
    host, port = daphne_portal.url.removeprefix("http://").split(":")
    for path in RAW_STATIC_PATHS:
        connection = http.client.HTTPConnection(host, int(port), timeout=10)
        connection.request("GET", path)  # sent as written: no normalisation
        answer = connection.getresponse()
        body = answer.read()
        connection.close()
        assert answer.status == 404, (path, answer.status, body[:200])
        assert b"root:" not in body
    log = (daphne_portal.logs / "portal.log").read_text(errors="replace")
    assert "Traceback" not in log and " 500 " not in log, log[-3000:]


# --- An invalid WebSocket frame -----------------------------------------------------------

FRAMES = [
    {"text_data": "not json"},
    {"text_data": "{"},
    {"text_data": nested(DEEP, "list")},
    {"text_data": "x" * (2 * 1024 * 1024)},
    {"bytes_data": b"\x00\xff\xfe binary"},
    {"text_data": json.dumps({"type": "session.update", "session": {}})},
]


def signed_in_cookie(user) -> bytes:
    client = Client()
    client.force_login(user)
    return f"sessionid={client.cookies['sessionid'].value}".encode()


async def frames_then(path: str, cookie: bytes, group: str, event: dict) -> dict:
    """Connect, send every bad frame, then have the server send ``event`` to ``group``:
    what the socket sends next (the event's message if the frames were dropped; a crash of
    the consumer would raise here, a close would come first)."""
    communicator = WebsocketCommunicator(
        application,
        path,
        headers=[(b"cookie", cookie), (b"origin", b"http://testserver"), (b"host", b"testserver")],
    )
    connected, _ = await communicator.connect(timeout=10)
    assert connected, path
    for frame in FRAMES:
        await communicator.send_to(**frame)
    await get_channel_layer().group_send(group, event)
    try:
        return await communicator.receive_json_from(timeout=10)
    finally:
        await communicator.disconnect()


@pytest.mark.django_db(transaction=True)
def test_invalid_frames_on_the_updates_socket_are_dropped_and_it_still_listens(owner):
    event = {"type": "admin.audit", "kind": "probe"}
    message = async_to_sync(frames_then)(
        "/ws/updates/", signed_in_cookie(owner), user_group(owner.pk), event
    )
    assert message == {"type": "admin.audit", "kind": "probe"}


@pytest.mark.django_db(transaction=True)
def test_invalid_frames_on_the_live_class_socket_are_dropped_and_it_still_listens(owner):
    course = Course.objects.create(code="cs101", title="GPU 101")
    course.instructors.add(owner)
    event = {"type": "class.sessions", "sessions": [424242]}
    message = async_to_sync(frames_then)(
        "/ws/courses/cs101/", signed_in_cookie(owner), course_group(course.pk), event
    )
    assert message == {"type": "class.row", "session": 424242, "html": ""}


@pytest.mark.django_db
@pytest.mark.parametrize("segment", ["Õ", "١٢", "abc", "-1", "1.5"])
def test_an_id_that_is_not_digits_is_a_json_404_on_every_api_route(segment, admin_user):
    client = signed_in(admin_user)
    for method, url in (
        ("post", f"/api/v1/alerts/{segment}/acknowledge/"),
        ("post", f"/api/v1/thesis-grants/{segment}/revoke/"),
        ("post", f"/api/v1/quota-requests/{segment}/answer/"),
        ("get", f"/api/v1/sessions/{segment}/"),
        ("post", f"/api/agent/v1/sessions/{segment}/report/"),
    ):
        answer = getattr(client, method)(url, {}, content_type="application/json")
        assert answer.status_code == 404, (url, answer.content[:300])
        assert "detail" in answer.json()


@pytest.mark.django_db
def test_a_json_body_over_the_upload_limit_is_a_413(settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    body = json.dumps({"username": "x" * 2000, "password": "y"})
    answer = Client().post("/api/v1/auth/token/", body, content_type="application/json")
    assert answer.status_code == 413
    assert "too large" in answer.json()["detail"]
