"""LDAP sign-in against a real OpenLDAP slapd on 127.0.0.1 (tests/signin/slapd.py).

The settings come from ``portal.signin.ldap_config.configure`` over the variables a campus
admin would set (docs/signin.md, "LDAP"); people sign in through the real /login/ form.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import environ
import pytest
from django.conf import settings
from django.contrib.auth import BACKEND_SESSION_KEY
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client, override_settings

from people.models import Role
from portal import settings as portal_settings
from portal.signin import ldap_config
from scheduling.models import AuditEvent
from tests.e2e.conftest import browser, log_in, new_page  # noqa: F401 - fixtures
from tests.integration.conftest import (  # noqa: F401 - fixtures and the report hook
    pytest_runtest_makereport,
    stack,
)
from tests.integration.stack import free_port
from tests.signin.slapd import ldap_env, password_of, slapd  # noqa: F401 - the fixture

MODEL_BACKEND = "django.contrib.auth.backends.ModelBackend"
LDAP_BACKEND = "portal.signin.ldap.CampusLDAPBackend"
WRONG = "That username and password did not match."


def environment(variables: dict[str, str]) -> environ.Env:
    env = environ.Env()
    env.ENVIRON = variables
    return env


@contextmanager
def ldap_signin(uri: str, **more: str) -> Iterator[None]:
    """The settings.py way: ldap_config's backend before ModelBackend, its settings, the
    group mapping, all from the DESKPOOL_* variables (``more`` added)."""
    variables = {**ldap_env(uri), **more}
    env = environment(variables)
    part = ldap_config.configure(env, lambda name, default: variables.get(name, default))
    assert part is not None and part.name == "ldap"
    backends = list(settings.AUTHENTICATION_BACKENDS)
    at = backends.index(MODEL_BACKEND)
    backends[at:at] = part.backends
    with override_settings(
        AUTHENTICATION_BACKENDS=backends,
        SIGNIN_ADMIN_GROUPS=env.list("DESKPOOL_SIGNIN_ADMIN_GROUPS"),
        SIGNIN_FACULTY_GROUPS=env.list("DESKPOOL_SIGNIN_FACULTY_GROUPS"),
        **part.settings,
    ):
        yield


@pytest.fixture
def directory(slapd, db):  # noqa: F811 - the imported fixture
    with ldap_signin(slapd.uri):
        yield slapd


def sign_in(username: str, password: str) -> tuple[Client, Any]:
    client = Client()
    response = client.post("/login/", {"username": username, "password": password})
    return client, response


def signed_in_backend(client: Client) -> str | None:
    return client.session.get(BACKEND_SESSION_KEY)


# --- configure ---------------------------------------------------------------------------


def test_ldap_is_off_until_its_server_is_named():
    assert ldap_config.configure(environment({}), lambda name, default: default) is None


def test_a_server_without_a_user_search_base_is_a_configuration_error():
    env = environment({"DESKPOOL_LDAP_SERVER_URI": "ldap://ldap.campus.test"})
    with pytest.raises(environ.ImproperlyConfigured, match="USER_SEARCH_BASE"):
        ldap_config.configure(env, lambda name, default: default)


def test_the_bind_password_is_read_from_its_file(tmp_path, monkeypatch):
    secret_file = tmp_path / "bind-password"
    secret_file.write_text("from-the-file\n")
    monkeypatch.setenv("DESKPOOL_LDAP_BIND_PASSWORD_FILE", str(secret_file))
    variables = {
        "DESKPOOL_LDAP_SERVER_URI": "ldap://ldap.campus.test",
        "DESKPOOL_LDAP_USER_SEARCH_BASE": "ou=people,dc=campus,dc=test",
        "DESKPOOL_LDAP_START_TLS": "true",
        "DESKPOOL_LDAP_EMAIL_ATTR": "campusMail",
    }
    part = ldap_config.configure(environment(variables), portal_settings._secret)
    assert part is not None
    assert part.backends == [LDAP_BACKEND]
    assert part.settings["AUTH_LDAP_BIND_PASSWORD"] == "from-the-file"
    assert part.settings["AUTH_LDAP_START_TLS"] is True
    assert part.settings["AUTH_LDAP_CAMPUS_ATTRS"]["email"] == "campusMail"
    assert "AUTH_LDAP_GROUP_SEARCH" not in part.settings  # no group base: everyone a student


# --- signing in through /login/ ----------------------------------------------------------


@pytest.mark.parametrize(
    ("uid", "role", "admin", "department"),
    [
        ("lina", Role.STUDENT, False, "Physics"),
        ("felix", Role.FACULTY, False, "Chemistry"),
        ("greta", Role.FACULTY, True, "Computing"),
    ],
)
def test_the_first_sign_in_creates_the_account_from_the_directory(
    directory, uid, role, admin, department
):
    client, response = sign_in(uid, password_of(uid))
    assert response.status_code == 302 and response.url == "/", response.content[:2000]
    assert signed_in_backend(client) == LDAP_BACKEND
    user = User.objects.get(username=uid)
    assert not user.has_usable_password()
    assert user.is_staff is admin and user.is_active
    assert (user.member.role, user.member.department) == (role, department)
    assert user.email == f"{uid}@campus.test"
    assert AuditEvent.objects.filter(kind="account.created", actor="signin:ldap").count() == 1


def test_the_account_has_the_directorys_spelling_of_the_name(directory):
    client, response = sign_in(" FELIX", password_of("felix"))
    assert response.status_code == 302
    assert list(User.objects.filter(username__iexact="felix").values_list("username")) == [
        ("felix",)
    ]


def test_a_wrong_password_or_an_unknown_name_is_refused(directory):
    for username, password in [("lina", "not-her-password"), ("nobody", "pw-nobody")]:
        client, response = sign_in(username, password)
        assert response.status_code == 200
        assert WRONG in response.content.decode()
        assert signed_in_backend(client) is None
    assert not User.objects.filter(username__in=["lina", "nobody"]).exists()


def test_a_changed_group_changes_the_role_at_the_next_sign_in(directory):
    _client, response = sign_in("bruno", password_of("bruno"))
    assert response.status_code == 302
    assert User.objects.get(username="bruno").member.role == Role.STUDENT
    directory.set_groups("bruno", remove="students", add="faculty")
    try:
        _client, response = sign_in("bruno", password_of("bruno"))
        assert response.status_code == 302
        assert User.objects.get(username="bruno").member.role == Role.FACULTY
    finally:
        directory.set_groups("bruno", remove="faculty", add="students")
    assert AuditEvent.objects.filter(kind="account.updated", actor="signin:ldap").count() == 1


def test_a_local_account_is_not_taken_over(directory):
    local = User.objects.create_user("lola", password="local-pw", email="lola@local")
    client, response = sign_in("lola", password_of("lola"))  # her directory password
    assert response.status_code == 200
    page = response.content.decode()
    assert WRONG in page and "lola is a local account" in page
    assert signed_in_backend(client) is None
    local.refresh_from_db()
    assert local.check_password("local-pw") and local.email == "lola@local"
    # Her own password still works, through ModelBackend.
    client, response = sign_in("lola", "local-pw")
    assert response.status_code == 302
    assert signed_in_backend(client) == MODEL_BACKEND


def test_a_disabled_account_stays_out(directory):
    dora = User(username="dora", is_active=False)
    dora.set_unusable_password()
    dora.save()
    client, response = sign_in("dora", password_of("dora"))
    assert response.status_code == 200
    assert "This account is disabled" in response.content.decode()
    assert signed_in_backend(client) is None


def test_an_unreachable_directory_gives_the_normal_error(db, caplog):
    User.objects.create_user("keeper", password="keeper-pw")
    with ldap_signin(f"ldap://127.0.0.1:{free_port()}"), caplog.at_level(logging.WARNING):
        client, response = sign_in("lina", password_of("lina"))
        assert response.status_code == 200
        assert WRONG in response.content.decode()
        assert signed_in_backend(client) is None
        # Local accounts still sign in while the directory is down.
        client, response = sign_in("keeper", "keeper-pw")
        assert response.status_code == 302
    assert not User.objects.filter(username="lina").exists()
    assert "SERVER_DOWN" in caplog.text  # django-auth-ldap says why, in one line
    assert not [record for record in caplog.records if record.exc_info]


def test_a_directory_that_does_not_answer_fails_the_sign_in_within_its_timeout(db, caplog):
    with socket.socket() as silent:  # accepts connections, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        uri = f"ldap://127.0.0.1:{silent.getsockname()[1]}"
        with ldap_signin(uri, DESKPOOL_LDAP_TIMEOUT_S="0.5"), caplog.at_level(logging.WARNING):
            client, response = sign_in("lina", password_of("lina"))
    assert response.status_code == 200
    assert WRONG in response.content.decode()
    assert "TIMEOUT" in caplog.text


# --- a browser, a real portal process ----------------------------------------------------


@pytest.fixture
def stack_options(slapd):  # noqa: F811 - the imported fixture
    return {"extra_env": ldap_env(slapd.uri)}


@pytest.mark.browser
@pytest.mark.integration
def test_a_student_signs_in_through_the_login_page(stack, new_page):  # noqa: F811
    page = new_page()
    log_in(page, "lina", password_of("lina"))
    assert page.url == f"{stack.url}/"
    try:
        lina = User.objects.get(username="lina")
        assert lina.member.role == Role.STUDENT and lina.member.department == "Physics"
        assert not lina.has_usable_password()
    finally:
        # Queried while Playwright's loop runs: this context's own connection; close it, or
        # it keeps the test database open past its teardown.
        connection.close()
