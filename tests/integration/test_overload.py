"""Overload is answered 503 with Retry-After, never 500, and nothing is half-created.

A real portal process (daphne) with a bounded database pool (one connection, a short wait).
While it runs, PostgreSQL stops taking connections to its database and drops the ones it
has (``ALLOW_CONNECTIONS false``, then ``pg_terminate_backend``): submissions and pages are
answered 503 with Retry-After and no session row is written; when the database takes
connections again, the same process answers normally, without a restart.
"""

from __future__ import annotations

import re

import httpx
import psycopg
import pytest
from django.db import connection

from scheduling.models import Session

from ..conftest import give_thesis_grant
from .stack import wait_for

pytestmark = [pytest.mark.integration]


@pytest.fixture
def stack_options():
    return {
        "extra_env": {"DESKPOOL_DB_POOL_MAX": "1", "DESKPOOL_DB_POOL_TIMEOUT_S": "0.5"},
    }


@pytest.fixture(autouse=True)
def _fresh_pool_after():
    """This process's own pooled connections were cut too, and its pool backs off while
    reconnecting: start the next test with a new pool."""
    yield
    connection.close()
    connection.close_pool()


def _database_takes_connections(name: str, allowed: bool) -> None:
    """From the maintenance database (a database cannot refuse its own connections)."""
    s = connection.settings_dict
    with psycopg.connect(
        host=s["HOST"] or "127.0.0.1",
        port=s["PORT"] or 5432,
        user=s["USER"],
        password=s["PASSWORD"] or None,
        dbname="postgres",
        autocommit=True,
    ) as admin:
        admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS {str(allowed).lower()}')
        if not allowed:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = %s AND pid <> %s",
                [name, connection.connection.info.backend_pid],
            )


def test_an_unreachable_database_is_answered_503_and_recovers(stack, owner, profile):
    give_thesis_grant(owner)
    client = httpx.Client(base_url=stack.url, timeout=20)
    token = client.post(
        "/api/v1/auth/token/", json={"username": "ada", "password": "pw-ada"}
    ).json()["token"]
    client.headers["Authorization"] = f"Token {token}"
    assert client.get("/api/v1/profiles/").status_code == 200
    browser = httpx.Client(base_url=stack.url, timeout=20)
    csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', browser.get("/login/").text)
    assert csrf
    name = connection.settings_dict["NAME"]
    _database_takes_connections(name, False)
    try:
        submitted = client.post(
            "/api/v1/sessions/", json={"profile": profile.pk, "purpose": "thesis"}
        )
        # A student signing in at class start: the page needs the database.
        page = browser.post(
            "/login/",
            data={"username": "ada", "password": "pw-ada", "csrfmiddlewaretoken": csrf[1]},
        )
    finally:
        _database_takes_connections(name, True)
    assert submitted.status_code == 503, submitted.text
    assert int(submitted.headers["Retry-After"]) > 0
    assert "try again" in submitted.json()["detail"]
    assert page.status_code == 503
    assert page.headers["Retry-After"] == submitted.headers["Retry-After"]
    assert "Deskpool is busy" in page.text
    assert not Session.objects.exists()  # nothing half-created

    # The same process recovers by itself once the database answers again.
    again = wait_for(
        lambda: (
            r
            if (
                r := client.post(
                    "/api/v1/sessions/", json={"profile": profile.pk, "purpose": "thesis"}
                )
            ).status_code
            != 503
            else None
        ),
        30,
        "the portal answering again",
    )
    assert again.status_code == 201, again.text
    assert Session.objects.count() == 1
    log = (stack.logs / "portal.log").read_text()
    assert "overloaded, answered 503" in log
    assert "Traceback" not in log
    assert "Internal Server Error" not in log
