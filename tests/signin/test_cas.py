"""CAS 3.0 sign-in against a real CAS server: django-cas-server in its own process and
SQLite database (tests/signin/cas_server/), and, for the flows, a real portal process (daphne)
with the DESKPOOL_CAS_* variables set."""

from __future__ import annotations

import re
from urllib.parse import quote

import environ
import pytest
import requests
from django.conf import settings
from django.contrib.auth.models import User
from django.db import connections
from django.test import RequestFactory, override_settings

from people.models import Member, Role
from portal.signin import cas, cas_config
from portal.signin.identity import SigninRefused, refusal_of
from scheduling.models import AuditEvent
from tests.e2e.conftest import browser, new_page  # noqa: F401 - fixtures
from tests.integration.conftest import database_url
from tests.integration.stack import Stack, free_port
from tests.signin.cas_server.process import CasServer
from tests.signin.cas_server.tls import TlsFront, make_ca_and_certificate

PASSWORD = "cas-secret-1"
# The campus's CAS directory; "ada-local" is also a local portal account in one test.
CAMPUS = [
    {
        "username": "cas-student",
        "password": PASSWORD,
        "email": "student@campus.test",
        "first_name": "Stu",
        "last_name": "Dent",
        "groups": ["students"],
        "department": "Physics",
    },
    {
        "username": "cas-prof",
        "password": PASSWORD,
        "email": "prof@campus.test",
        "first_name": "Pro",
        "last_name": "Fessor",
        "groups": ["cs-staff", "GPU-Faculty"],
        "department": "Computer Science",
    },
    {"username": "ada-local", "password": PASSWORD, "groups": ["gpu-admins"]},
]
# The portal's ServicePattern: any portal on 127.0.0.1, the released attributes under their
# directory names (the department as "ou": a non-default name, set by variable below).
PORTAL_SERVICE = {
    "name": "deskpool",
    "pattern": r"^http://127\.0\.0\.1:\d+/signin/cas/.*$",
    "single_log_out": True,
    "attributes": {
        "groups": "memberOf",
        "department": "ou",
        "email": "mail",
        "first_name": "givenName",
        "last_name": "sn",
    },
}
PORTAL_ENV = {
    "DESKPOOL_CAS_DEPARTMENT_ATTRIBUTE": "ou",
    "DESKPOOL_SIGNIN_FACULTY_GROUPS": "gpu-faculty",
    "DESKPOOL_SIGNIN_ADMIN_GROUPS": "gpu-admins",
}


@pytest.fixture(scope="module")
def cas_server(tmp_path_factory):
    server = CasServer(tmp_path_factory.mktemp("cas-server"), CAMPUS, [PORTAL_SERVICE])
    server.start()
    yield server
    server.stop()


@pytest.fixture
def cas_settings(cas_server, monkeypatch):
    """The portal's settings for this CAS server, as cas_config reads them from the
    environment, applied to this test process."""
    monkeypatch.setenv("DESKPOOL_CAS_SERVER_URL", cas_server.url.rstrip("/"))
    for name, value in PORTAL_ENV.items():
        monkeypatch.setenv(name, value)
    part = cas_config.configure(environ.Env(), lambda name, default: default)
    assert part is not None
    groups = {"SIGNIN_FACULTY_GROUPS": ["gpu-faculty"], "SIGNIN_ADMIN_GROUPS": ["gpu-admins"]}
    with override_settings(**part.settings, **groups):
        yield part


@pytest.fixture
def stack(transactional_db, tmp_path, cas_server, request):
    """A real portal process (daphne) with CAS sign-in on, against ``cas_server``."""
    if settings.EMBEDDED:
        pytest.skip("the portal process needs the real Redis: set REDIS_URL")
    env = {"DESKPOOL_CAS_SERVER_URL": cas_server.url, **PORTAL_ENV}
    running = Stack(tmp_path, database_url(), settings.REDIS_URL, extra_env=env)
    try:
        running.start_portal()
        yield running
    finally:
        running.close()
        # Shown when the test fails (pytest prints a failing test's output only).
        print(f"--- portal log ---\n{running.log_tail('portal')}")
        print(f"--- CAS server log ---\n{cas_server.log_tail()}")


def assert_no_server_error(stack: Stack) -> None:
    log = (stack.logs / "portal.log").read_text(errors="replace")
    assert "Traceback" not in log and " 500 " not in log, log


def service_url(stack: Stack, next_page: str = "/") -> str:
    """The service URL django-cas-ng gives the CAS server for this portal."""
    return f"{stack.url}/signin/cas/login/?next={quote(next_page, safe='')}"


# --- configuration ----------------------------------------------------------------------


def test_cas_is_off_until_its_server_is_named(monkeypatch):
    monkeypatch.delenv("DESKPOOL_CAS_SERVER_URL", raising=False)
    assert cas_config.configure(environ.Env(), lambda name, default: default) is None
    monkeypatch.setenv("DESKPOOL_CAS_SERVER_URL", "https://cas.campus.test/cas")
    monkeypatch.setenv("DESKPOOL_CAS_GROUPS_ATTRIBUTE", "groups")
    part = cas_config.configure(environ.Env(), lambda name, default: default)
    assert part is not None
    assert part.backends == ["portal.signin.cas.CampusCASBackend"]
    assert part.settings["CAS_SERVER_URL"] == "https://cas.campus.test/cas/"
    assert part.settings["CAS_VERSION"] == "3"
    # django-cas-ng must neither create accounts nor write attributes onto them.
    assert part.settings["CAS_CREATE_USER"] is False
    assert part.settings["CAS_APPLY_ATTRIBUTES_TO_USER"] is False
    assert part.settings["SIGNIN_CAS_ATTRIBUTES"]["groups"] == "groups"
    assert part.settings["SIGNIN_CAS_ATTRIBUTES"]["department"] == "department"
    assert (part.settings["SIGNIN_CAS_TIMEOUT_S"], part.settings["SIGNIN_CAS_CA_FILE"]) == (10, "")


# --- the backend, in this process, with real tickets from the CAS server ------------------


def test_a_real_ticket_makes_a_faculty_account_through_sync_person(db, cas_server, cas_settings):
    service = "http://127.0.0.1:8000/signin/cas/login/?next=%2F"
    ticket = cas_server.service_ticket("cas-prof", PASSWORD, service)
    request = RequestFactory().get("/signin/cas/login/", {"ticket": ticket})

    user = cas.CampusCASBackend().authenticate(request, ticket=ticket, service=service)

    assert user is not None and user.username == "cas-prof"
    assert not user.has_usable_password()
    assert (user.email, user.first_name, user.last_name) == ("prof@campus.test", "Pro", "Fessor")
    assert not user.is_staff
    member = Member.objects.get(user=user)
    assert (member.role, member.department) == (Role.FACULTY, "Computer Science")
    assert AuditEvent.objects.filter(kind="account.created", actor="signin:cas").exists()
    # A ticket is good for one validation only.
    with pytest.raises(SigninRefused):
        cas.CampusCASBackend().authenticate(request, ticket=ticket, service=service)


def test_a_ticket_for_another_service_is_refused(db, cas_server, cas_settings):
    ticket = cas_server.service_ticket(
        "cas-student", PASSWORD, "http://127.0.0.1:8000/signin/cas/login/?next=%2F"
    )
    request = RequestFactory().get("/")
    with pytest.raises(SigninRefused, match="did not confirm"):
        cas.CampusCASBackend().authenticate(
            request, ticket=ticket, service="http://127.0.0.1:8001/signin/cas/login/?next=%2F"
        )
    assert not User.objects.filter(username="cas-student").exists()


def test_an_unreachable_cas_server_is_a_refusal_not_an_error(db, cas_settings):
    request = RequestFactory().get("/")
    with (
        override_settings(CAS_SERVER_URL=f"http://127.0.0.1:{free_port()}/cas/"),
        pytest.raises(SigninRefused, match="could not be reached"),
    ):
        cas.CampusCASBackend().authenticate(request, ticket="ST-1", service="http://x/")
    assert "could not be reached" in refusal_of(request)


def test_the_cas_servers_certificate_is_verified_against_the_campus_ca(
    db, cas_server, cas_settings, tmp_path
):
    ca, certificate, key = make_ca_and_certificate(tmp_path)
    service = "http://127.0.0.1:8000/signin/cas/login/?next=%2F"
    request = RequestFactory().get("/")
    backend = cas.CampusCASBackend()
    with (
        TlsFront(f"http://127.0.0.1:{cas_server.port}", certificate, key) as front,
        override_settings(CAS_SERVER_URL=front.url + "cas/"),
    ):
        ticket = cas_server.service_ticket("cas-student", PASSWORD, service)
        # Signed by a CA the usual bundle does not know: refused before the ticket is sent.
        with pytest.raises(SigninRefused, match="could not be reached"):
            backend.authenticate(request, ticket=ticket, service=service)
        with override_settings(SIGNIN_CAS_CA_FILE=str(ca)):
            user = backend.authenticate(request, ticket=ticket, service=service)
    assert user is not None and user.username == "cas-student"


# --- through a real portal process ------------------------------------------------------


def login_page_message(response: requests.Response) -> str:
    found = re.search(r'<p class="notice [^"]*" role="status">([^<]*)</p>', response.text)
    return found.group(1) if found else ""


@pytest.mark.integration
def test_forged_tickets_local_accounts_foreign_next_pages_refused_single_logout_works(
    stack, cas_server
):
    with requests.Session() as client:
        # A forged ticket: back on /login/ with the reason, not signed in.
        forged = client.get(service_url(stack) + "&ticket=ST-forged-0123456789", timeout=30)
        assert forged.status_code == 200 and forged.url == f"{stack.url}/login/"
        assert "did not confirm" in login_page_message(forged)
        assert client.get(f"{stack.url}/", allow_redirects=False, timeout=30).status_code == 302

        # A local account with a password is not taken over by the CAS user of that name.
        local = User.objects.create_user("ada-local", password="local-pw", first_name="Ada")
        ticket = cas_server.service_ticket("ada-local", PASSWORD, service_url(stack))
        refused = client.get(service_url(stack) + f"&ticket={ticket}", timeout=30)
        assert refused.url == f"{stack.url}/login/"
        assert "ada-local is a local account" in login_page_message(refused)
        local.refresh_from_db()
        assert local.has_usable_password() and local.check_password("local-pw")
        assert (local.first_name, local.is_staff) == ("Ada", False)
        assert client.get(f"{stack.url}/", allow_redirects=False, timeout=30).status_code == 302

        # Signing out at the CAS server (single logout) ends the portal session too.
        ticket = cas_server.service_ticket("cas-student", PASSWORD, service_url(stack), client)
        home = client.get(service_url(stack) + f"&ticket={ticket}", timeout=30)
        assert home.url == f"{stack.url}/" and "cas-student" in home.text
        client.get(cas_server.url + "logout", timeout=30).raise_for_status()
        assert client.get(f"{stack.url}/", allow_redirects=False, timeout=30).status_code == 302

        # After sign-in the browser goes only to this portal.
        foreign = client.get(
            f"{stack.url}/signin/cas/login/?next=https://evil.example/",
            allow_redirects=False,
            timeout=30,
        )
        assert foreign.status_code == 400
        # Single logout requests that are not ones.
        slo = client.post(
            f"{stack.url}/signin/cas/callback/", data={"logoutRequest": "<not xml"}, timeout=30
        )
        assert slo.status_code == 400
    assert_no_server_error(stack)


@pytest.mark.browser
@pytest.mark.integration
def test_a_student_signs_in_through_cas_and_logging_out_ends_the_cas_session(
    stack,
    cas_server,
    new_page,  # noqa: F811 - the imported fixture
):
    page = new_page()
    page.goto("/login/")
    page.click("#signin-cas")
    page.wait_for_url(re.compile("^" + re.escape(cas_server.url + "login")))
    page.fill("input[name=username]", "cas-student")
    page.fill("input[name=password]", PASSWORD)
    with page.expect_navigation(url=f"{stack.url}/"):
        page.click("#login_form button[type=submit]")
    assert page.locator("header nav").inner_text().startswith("cas-student"), page.content()

    # Playwright's event loop runs in this thread: the ORM gets a connection of its own,
    # taken fresh from the pool (one left from an earlier test may have been cut since).
    connections.close_all()
    try:
        user = User.objects.get(username="cas-student")
        member = Member.objects.get(user=user)
    finally:
        connections.close_all()
    assert (member.role, member.department) == (Role.STUDENT, "Physics")
    assert (user.email, user.is_staff, user.has_usable_password()) == (
        "student@campus.test",
        False,
        False,
    )

    # The portal's logout ends the CAS session too: back on /login/, and the CAS link now
    # asks for the password again instead of signing straight back in.
    with page.expect_navigation(url=f"{stack.url}/login/"):
        page.click("header form[action='/logout/'] button")
    page.click("#signin-cas")
    page.wait_for_url(re.compile("^" + re.escape(cas_server.url + "login")))
    assert page.locator("input[name=password]").is_visible()
    page.goto("/")
    assert page.url.startswith(f"{stack.url}/login/")
    assert_no_server_error(stack)
