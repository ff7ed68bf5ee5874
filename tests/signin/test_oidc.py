"""OIDC sign-in against a real OpenID Connect provider: django-oauth-toolkit with OIDC on, in its
own process and SQLite database (tests/signin/oidc_provider/), and, for the flows, a real
portal process (daphne) with the DESKPOOL_OIDC_* variables set."""

from __future__ import annotations

import html
import re

import environ
import pytest
import requests
from django.conf import settings
from django.contrib.auth import authenticate
from django.contrib.auth.models import User
from django.db import connections
from django.test import RequestFactory, override_settings
from django.urls import path

from people.models import Member, Role
from portal.signin import oidc, oidc_config
from portal.signin.identity import SigninRefused, refusal_of
from scheduling.models import AuditEvent
from tests.e2e.conftest import browser, new_page  # noqa: F401 - fixtures
from tests.integration.conftest import database_url
from tests.integration.stack import Stack, free_port
from tests.signin.oidc_provider.process import OidcProvider

PASSWORD = "oidc-secret-1"
# The campus directory behind the provider; "ada-local" is also a local portal account in one
# test, and the provider releases no user name for "nameless".
CAMPUS: list[dict] = [
    {
        "username": "oidc-student",
        "password": PASSWORD,
        "email": "student@campus.test",
        "first_name": "Stu",
        "last_name": "Dent",
        "groups": ["students"],
        "department": "Physics",
    },
    {
        "username": "oidc-prof",
        "password": PASSWORD,
        "email": "prof@campus.test",
        "first_name": "Pro",
        "last_name": "Fessor",
        "groups": ["cs-staff", "GPU-Faculty"],
        "department": "Computer Science",
    },
    {"username": "oidc-admin", "password": PASSWORD, "groups": ["gpu-admins"]},
    {"username": "ada-local", "password": PASSWORD, "groups": ["gpu-admins"]},
    {"username": "nameless", "password": PASSWORD, "claimed_username": ""},
]
PORTAL_ENV = {
    "DESKPOOL_SIGNIN_FACULTY_GROUPS": "gpu-faculty",
    "DESKPOOL_SIGNIN_ADMIN_GROUPS": "gpu-admins",
}


# This process's URLs in the tests of the backend (the portal's own leave OIDC out while it is
# off, as it is for this process): the callback, whose address the token request names.
urlpatterns = [
    path("oidc/callback/", oidc.CallbackView.as_view(), name="oidc_authentication_callback")
]


def no_secret(name: str, default: str) -> str:
    return default


@pytest.fixture(scope="module")
def provider(tmp_path_factory):
    running = OidcProvider(tmp_path_factory.mktemp("oidc-provider"), CAMPUS)
    running.start()
    yield running
    running.stop()


@pytest.fixture
def oidc_settings(provider, monkeypatch):
    """The portal's settings for this provider, as oidc_config reads them from the
    environment, applied to this test process."""
    for name, value in provider.portal_env().items():
        monkeypatch.setenv(name, value)
    part = oidc_config.configure(environ.Env(), lambda name, default: environ.Env().str(name))
    assert part is not None
    groups = {"SIGNIN_FACULTY_GROUPS": ["gpu-faculty"], "SIGNIN_ADMIN_GROUPS": ["gpu-admins"]}
    with override_settings(**part.settings, **groups, ROOT_URLCONF=__name__):
        yield part


@pytest.fixture
def stack(transactional_db, tmp_path, provider, request):
    """A real portal process (daphne) with OIDC sign-in on, against ``provider``."""
    if settings.EMBEDDED:
        pytest.skip("the portal process needs the real Redis: set REDIS_URL")
    env = {**provider.portal_env(), **PORTAL_ENV}
    running = Stack(tmp_path, database_url(), settings.REDIS_URL, extra_env=env)
    try:
        running.start_portal()
        yield running
    finally:
        running.close()
        # Shown when the test fails (pytest prints a failing test's output only).
        print(f"--- portal log ---\n{running.log_tail('portal')}")
        print(f"--- OIDC provider log ---\n{provider.log_tail()}")


def assert_no_server_error(stack: Stack) -> None:
    log = (stack.logs / "portal.log").read_text(errors="replace")
    assert "Traceback" not in log and " 500 " not in log, log


def login_page_message(response: requests.Response) -> str:
    found = re.search(r'<p class="notice [^"]*" role="status">([^<]*)</p>', response.text)
    return html.unescape(found.group(1)) if found else ""


def sign_in(client: requests.Session, stack: Stack, provider: OidcProvider, username: str):
    """The single sign-on link, then the provider's login form, as a browser would; the
    answer at the end of the redirects."""
    form = client.get(f"{stack.url}/oidc/authenticate/", timeout=30)
    assert form.url.startswith(f"{provider.url}/accounts/login/"), form.url
    fields = dict(re.findall(r'name="(csrfmiddlewaretoken|next)" value="([^"]*)"', form.text))
    return client.post(
        form.url,
        data={
            "csrfmiddlewaretoken": fields["csrfmiddlewaretoken"],
            "next": html.unescape(fields["next"]),
            "username": username,
            "password": PASSWORD,
        },
        timeout=30,
    )


# --- configuration and claims -----------------------------------------------------------


def test_oidc_is_off_until_its_client_is_named(monkeypatch):
    monkeypatch.delenv("DESKPOOL_OIDC_CLIENT_ID", raising=False)
    assert oidc_config.configure(environ.Env(), no_secret) is None

    monkeypatch.setenv("DESKPOOL_OIDC_CLIENT_ID", "deskpool")
    monkeypatch.setenv("DESKPOOL_OIDC_AUTHORIZATION_ENDPOINT", "https://idp.campus.test/auth")
    for name in ("TOKEN", "USERINFO", "JWKS"):
        monkeypatch.delenv(f"DESKPOOL_OIDC_{name}_ENDPOINT", raising=False)
    with pytest.raises(environ.ImproperlyConfigured, match="DESKPOOL_OIDC_TOKEN_ENDPOINT"):
        oidc_config.configure(environ.Env(), no_secret)

    for name in ("TOKEN", "USERINFO", "JWKS"):
        monkeypatch.setenv(f"DESKPOOL_OIDC_{name}_ENDPOINT", f"https://idp.campus.test/{name}")
    monkeypatch.setenv("DESKPOOL_OIDC_GROUPS_CLAIM", "memberOf")
    secrets = {"DESKPOOL_OIDC_CLIENT_SECRET": "read-from-its-file"}
    part = oidc_config.configure(environ.Env(), lambda name, default: secrets.get(name, default))
    assert part is not None and part.name == "oidc"
    assert part.backends == ["portal.signin.oidc.CampusOIDCBackend"]
    assert part.settings["OIDC_RP_CLIENT_SECRET"] == "read-from-its-file"
    assert part.settings["OIDC_RP_SIGN_ALGO"] == "RS256"
    assert part.settings["OIDC_OP_JWKS_ENDPOINT"] == "https://idp.campus.test/JWKS"
    assert part.settings["OIDC_STORE_ID_TOKEN"] is True
    assert part.settings["OIDC_CAMPUS_CLAIMS"]["username"] == "preferred_username"
    assert part.settings["OIDC_CAMPUS_CLAIMS"]["groups"] == "memberOf"
    assert part.settings["OIDC_CAMPUS_CLAIMS"]["department"] == "department"


CLAIM_NAMES = {
    "username": "preferred_username",
    "groups": "roles",
    "department": "ou",
    "email": "email",
    "first_name": "given_name",
    "last_name": "family_name",
}


@override_settings(OIDC_CAMPUS_CLAIMS=CLAIM_NAMES)
def test_claims_map_to_a_campus_identity():
    identity = oidc.identity_from(
        {
            "sub": "17",
            "preferred_username": " jdoe ",
            "email": "jdoe@campus.test",
            "given_name": "Jo",
            "family_name": "Doe",
            "roles": ["gpu-faculty", "staff"],
            "ou": ["Chemistry"],
        }
    )
    assert (identity.username, identity.email, identity.first_name) == (
        "jdoe",
        "jdoe@campus.test",
        "Jo",
    )
    assert identity.groups == ("gpu-faculty", "staff")
    assert (identity.department, identity.source) == ("Chemistry", "oidc")
    # One string for several groups.
    assert oidc.identity_from({"preferred_username": "x", "roles": "a, b"}).groups == ("a", "b")
    for claims in ({"sub": "17"}, {"preferred_username": "  "}, {"preferred_username": None}):
        with pytest.raises(SigninRefused, match="no usable user name"):
            oidc.identity_from(claims)


# --- the backend, in this process, against the real provider ------------------------------


def test_a_code_the_provider_never_issued_is_refused(db, provider, oidc_settings):
    request = RequestFactory().get("/oidc/callback/", {"code": "forged", "state": "s"})
    with pytest.raises(SigninRefused, match="did not confirm"):
        oidc.CampusOIDCBackend().authenticate(request, nonce="n", code_verifier="v" * 64)
    assert "did not confirm" in refusal_of(request)
    # Password sign-ins are not this backend's.
    assert oidc.CampusOIDCBackend().authenticate(request, username="a", password="b") is None


def test_an_unreachable_provider_is_a_refusal_not_an_error(db, oidc_settings):
    request = RequestFactory().get("/oidc/callback/", {"code": "c", "state": "s"})
    unreachable = f"http://127.0.0.1:{free_port()}/token/"
    with (
        override_settings(OIDC_OP_TOKEN_ENDPOINT=unreachable),
        pytest.raises(SigninRefused, match="could not be reached"),
    ):
        oidc.CampusOIDCBackend().authenticate(request, nonce="n", code_verifier="v" * 64)


def test_failed_sign_ins_do_not_lock_single_sign_on_out_for_an_address(db, oidc_settings):
    backends = [
        "portal.signin.lockout.LockoutBackend",
        "portal.signin.oidc.CampusOIDCBackend",
        "django.contrib.auth.backends.ModelBackend",
    ]
    refusals = []
    with override_settings(AUTHENTICATION_BACKENDS=backends):
        for _attempt in range(settings.AXES_FAILURE_LIMIT + 1):
            request = RequestFactory().get("/oidc/callback/", {"code": "forged", "state": "s"})
            assert authenticate(request=request, nonce="n", code_verifier="v" * 64) is None
            refusals.append(refusal_of(request))
    # Each one was judged by the provider's answer, none refused for the address.
    assert all("did not confirm" in refusal for refusal in refusals), refusals


# --- through a real portal process ------------------------------------------------------


@pytest.mark.integration
def test_groups_make_roles_and_local_accounts_are_not_taken_over(stack, provider):
    with requests.Session() as client:
        home = sign_in(client, stack, provider, "oidc-prof")
        assert home.status_code == 200 and home.url == f"{stack.url}/", home.url
    prof = User.objects.get(username="oidc-prof")
    member = Member.objects.get(user=prof)
    assert (member.role, member.department) == (Role.FACULTY, "Computer Science")
    assert (prof.email, prof.first_name, prof.is_staff) == ("prof@campus.test", "Pro", False)
    assert not prof.has_usable_password()
    assert AuditEvent.objects.filter(kind="account.created", actor="signin:oidc").exists()

    with requests.Session() as client:
        assert sign_in(client, stack, provider, "oidc-admin").url == f"{stack.url}/"
    assert User.objects.get(username="oidc-admin").is_staff

    # A local account with a password is not taken over by the provider's user of that name.
    local = User.objects.create_user("ada-local", password="local-pw", first_name="Ada")
    with requests.Session() as client:
        refused = sign_in(client, stack, provider, "ada-local")
        assert refused.url == f"{stack.url}/login/"
        assert "ada-local is a local account" in login_page_message(refused)
        assert client.get(f"{stack.url}/", allow_redirects=False, timeout=30).status_code == 302
    local.refresh_from_db()
    assert local.check_password("local-pw")
    assert (local.first_name, local.is_staff) == ("Ada", False)

    # Claims without a user name: refused, no account.
    with requests.Session() as client:
        nameless = sign_in(client, stack, provider, "nameless")
        assert nameless.url == f"{stack.url}/login/"
        assert "no usable user name" in login_page_message(nameless)
    assert not User.objects.filter(username__in=["nameless", ""]).exists()

    with requests.Session() as client:
        # After sign-in the browser goes only to this portal.
        foreign = client.get(
            f"{stack.url}/oidc/authenticate/?next=https://evil.example/",
            allow_redirects=False,
            timeout=30,
        )
        assert foreign.status_code == 400
        # A callback this browser never started, and the provider's refusal: /login/.
        forged = client.get(f"{stack.url}/oidc/callback/?code=x&state=forged", timeout=30)
        assert forged.url == f"{stack.url}/login/"
        assert "did not confirm" in login_page_message(forged)
        client.get(f"{stack.url}/oidc/authenticate/", allow_redirects=False, timeout=30)
        denied = client.get(f"{stack.url}/oidc/callback/?error=access_denied&state=x", timeout=30)
        assert denied.url == f"{stack.url}/login/"
        assert "did not confirm" in login_page_message(denied)
    assert_no_server_error(stack)


@pytest.mark.browser
@pytest.mark.integration
def test_a_student_signs_in_with_single_sign_on_and_logging_out_ends_the_provider_session(
    stack,
    provider,
    new_page,  # noqa: F811 - the imported fixture
):
    idp_login = re.compile("^" + re.escape(f"{provider.url}/accounts/login/"))
    page = new_page()
    page.goto("/login/")
    page.click("#signin-oidc")
    page.wait_for_url(idp_login)
    page.fill("#idp-login input[name=username]", "oidc-student")
    page.fill("#idp-login input[name=password]", PASSWORD)
    with page.expect_navigation(url=f"{stack.url}/"):
        page.click("#idp-login button[type=submit]")
    assert page.locator("header nav").inner_text().startswith("oidc-student"), page.content()

    # Playwright's event loop runs in this thread: the ORM gets a connection of its own,
    # taken fresh from the pool (one left from an earlier test may have been cut since).
    connections.close_all()
    try:
        user = User.objects.get(username="oidc-student")
        member = Member.objects.get(user=user)
    finally:
        connections.close_all()
    assert (member.role, member.department) == (Role.STUDENT, "Physics")
    assert (user.email, user.is_staff, user.has_usable_password()) == (
        "student@campus.test",
        False,
        False,
    )

    # The portal's logout ends the provider's session too: back on /login/, and the single
    # sign-on link now asks for the password again instead of signing straight back in.
    with page.expect_navigation(url=f"{stack.url}/login/"):
        page.click("header form[action='/logout/'] button")
    page.click("#signin-oidc")
    page.wait_for_url(idp_login)
    assert page.locator("#idp-login input[name=password]").is_visible()
    page.goto("/")
    assert page.url.startswith(f"{stack.url}/login/")
    assert_no_server_error(stack)
