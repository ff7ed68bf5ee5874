"""Production settings switched on by environment (issue 14, finding 8): HSTS, Secure
cookies and the forwarded scheme behind nginx, the Content-Security-Policy, no-store on the
desktop page, the WebSocket Origin checked on scheme, host and port, and var/ readable by its
owner only."""

from __future__ import annotations

import os
import stat
import urllib.request

import environ
import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.test import Client

from bench.demo import private_var_dir
from portal.asgi import application
from portal.live.ws_origin import origin_allowed
from portal.server import hardening
from scheduling.choices import Purpose, SessionState
from scheduling.models import Node, Session
from scheduling.services.sessions import check_submit, do_submit

from ..conftest import gpu_inventory
from ..integration.conftest import database_url
from ..integration.stack import Stack


def test_nothing_switched_on_gives_plain_http_settings_and_a_policy(monkeypatch):
    for name in ("DESKPOOL_BEHIND_TLS_PROXY", "DESKPOOL_HSTS_SECONDS", "DESKPOOL_CSP_REPORT_ONLY"):
        monkeypatch.delenv(name, raising=False)
    values = hardening.read(environ.Env(), {})
    assert values["SECURE_HSTS_SECONDS"] == 0
    assert values["SESSION_COOKIE_SECURE"] is False
    assert values["SESSION_COOKIE_AGE"] == 12 * 3600
    assert "SESSION_COOKIE_NAME" not in values
    assert "SECURE_PROXY_SSL_HEADER" not in values
    assert values["CONTENT_SECURITY_POLICY"]["DIRECTIVES"]["script-src"] == ["'self'"]


def test_behind_tls_proxy_with_hsts_and_a_report_only_policy(monkeypatch):
    monkeypatch.setenv("DESKPOOL_BEHIND_TLS_PROXY", "true")
    monkeypatch.setenv("DESKPOOL_HSTS_SECONDS", "31536000")
    monkeypatch.setenv("DESKPOOL_HSTS_INCLUDE_SUBDOMAINS", "true")
    monkeypatch.setenv("DESKPOOL_CSP_REPORT_ONLY", "true")
    idp = {"OIDC_OP_LOGOUT_ENDPOINT": "https://idp.campus.edu:8443/logout?x=1", "N": 3}
    values = hardening.read(environ.Env(), idp)
    assert values["SECURE_PROXY_SSL_HEADER"] == ("HTTP_X_FORWARDED_PROTO", "https")
    assert values["SESSION_COOKIE_SECURE"] is values["CSRF_COOKIE_SECURE"] is True
    assert (values["SECURE_HSTS_SECONDS"], values["SECURE_HSTS_INCLUDE_SUBDOMAINS"]) == (
        31536000,
        True,
    )
    assert values["SESSION_COOKIE_NAME"] == "__Host-sessionid"
    assert values["CONTENT_SECURITY_POLICY"] is None
    form_action = values["CONTENT_SECURITY_POLICY_REPORT_ONLY"]["DIRECTIVES"]["form-action"]
    assert form_action == ["'self'", "https://idp.campus.edu:8443"]


@pytest.mark.integration
def test_a_real_portal_behind_tls_sends_hsts_secure_cookies_and_the_policy(
    transactional_db, tmp_path
):
    if settings.EMBEDDED:
        pytest.skip("the integration tests need the real Redis: set REDIS_URL")
    extra = {"DESKPOOL_BEHIND_TLS_PROXY": "true", "DESKPOOL_HSTS_SECONDS": "31536000"}
    stack = Stack(tmp_path, database_url(), settings.REDIS_URL, extra_env=extra)
    try:
        stack.start_portal()

        def get(headers: dict[str, str]):
            request = urllib.request.Request(stack.url + "/login/", headers=headers)
            with urllib.request.urlopen(request, timeout=10) as answer:
                return answer.headers

        secure = get({"X-Forwarded-Proto": "https"})
        assert secure["Strict-Transport-Security"] == "max-age=31536000"
        cookie = secure["Set-Cookie"]
        assert cookie.startswith("__Host-csrftoken=") and "Secure" in cookie
        policy = secure["Content-Security-Policy"]
        assert "script-src 'self'" in policy and "frame-ancestors 'none'" in policy
        assert secure["X-Frame-Options"] == "DENY"
        plain = get({})
        assert plain["Strict-Transport-Security"] is None  # never on a plain-HTTP request
    finally:
        stack.close(None)


@pytest.mark.django_db
def test_the_desktop_page_is_never_stored(owner, profile, register_node):
    # A GPU the profile fits on: a profile no node could ever run is refused at submit.
    node, _ = register_node("nc-node", [gpu_inventory("GPU-nc", 0, shares=2)])
    Node.objects.filter(pk=node.pk).update(runtime="docker")
    session = do_submit(owner, check_submit(owner, profile.pk, Purpose.HOBBY, None))
    Session.objects.filter(pk=session.pk).update(
        state=SessionState.RUNNING, node=node, desktop_host="127.0.0.1", desktop_port=9
    )
    browser = Client()
    browser.force_login(owner)
    page = browser.get(f"/desktop/{session.pk}/")
    assert page.status_code == 200
    assert "no-store" in page["Cache-Control"]


def scope(origin: str | None, host: str, scheme: str = "ws", forwarded: str | None = None):
    headers = [(b"host", host.encode())]
    if origin is not None:
        headers.append((b"origin", origin.encode()))
    if forwarded is not None:
        headers.append((b"x-forwarded-proto", forwarded.encode()))
    return {"type": "websocket", "scheme": scheme, "headers": headers}


@pytest.mark.parametrize(
    ("origin", "host", "scheme", "allowed"),
    [
        ("http://127.0.0.1:8000", "127.0.0.1:8000", "ws", True),
        ("http://localhost", "localhost:80", "ws", True),  # the default port either way
        ("http://127.0.0.1:8001", "127.0.0.1:8000", "ws", False),  # another port
        ("https://127.0.0.1:8000", "127.0.0.1:8000", "ws", False),  # another scheme
        ("http://evil.example:8000", "127.0.0.1:8000", "ws", False),  # another host
        ("https://localhost", "localhost", "wss", True),
        ("http://localhost", "localhost", "wss", False),
        (None, "127.0.0.1:8000", "ws", False),  # no Origin at all
        ("null", "127.0.0.1:8000", "ws", False),
        ("http://127.0.0.1:8000/x", "127.0.0.1:8000", "ws", False),
        ("http://127.0.0.1:8000", "not-allowed.example:8000", "ws", False),  # ALLOWED_HOSTS
    ],
)
def test_the_websocket_origin_is_compared_on_scheme_host_and_port(origin, host, scheme, allowed):
    assert origin_allowed(scope(origin, host, scheme)) is allowed


def test_behind_the_proxy_the_forwarded_scheme_counts_and_trusted_origins_pass(settings):
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    assert origin_allowed(scope("https://localhost", "localhost", "ws", forwarded="https"))
    assert not origin_allowed(scope("http://localhost", "localhost", "ws", forwarded="https"))
    trusted = ["https://portal.campus.edu"]
    assert origin_allowed(scope("https://portal.campus.edu", "localhost"), trusted)


@pytest.mark.django_db(transaction=True)
def test_the_asgi_application_denies_a_foreign_origin_before_any_consumer(owner):
    browser = Client()
    browser.force_login(owner)
    cookie = f"sessionid={browser.cookies['sessionid'].value}".encode()

    async def connect(origin: str) -> bool:
        communicator = WebsocketCommunicator(
            application,
            "/ws/updates/",
            headers=[
                (b"host", b"127.0.0.1:8000"),
                (b"origin", origin.encode()),
                (b"cookie", cookie),
            ],
        )
        connected, _code = await communicator.connect(timeout=10)
        await communicator.disconnect()
        return connected

    assert async_to_sync(connect)("http://127.0.0.1:8000") is True
    assert async_to_sync(connect)("http://127.0.0.1:9999") is False


def test_var_is_readable_by_its_owner_only(tmp_path):
    var = tmp_path / "var"
    (var / "agents").mkdir(parents=True)
    old = var / "agents" / "node.token"
    old.write_text("secret")
    old.chmod(0o644)
    previous = os.umask(0o022)
    try:
        private_var_dir(var)
        (var / "new.sqlite3").write_text("")
        modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in [var, *var.rglob("*")]}
    finally:
        os.umask(previous)
    assert modes == {"var": 0o700, "agents": 0o700, "node.token": 0o600, "new.sqlite3": 0o600}
