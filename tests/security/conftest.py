"""A real portal (daphne) on the test database, for the tests that talk to one over HTTP."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.stack import Stack, database_url_of


@pytest.fixture(scope="module")
def daphne_portal(django_db_setup, django_db_blocker, tmp_path_factory) -> Iterator[Stack]:
    """One daphne for the module's tests; what a test commits (transactional_db) it sees."""
    from django.conf import settings
    from django.db import connection

    if settings.EMBEDDED or connection.vendor != "postgresql":
        pytest.skip("runs against PostgreSQL and Redis: set DATABASE_URL and REDIS_URL")
    stack = Stack(
        tmp_path_factory.mktemp("daphne"),
        database_url_of(connection.settings_dict),
        settings.REDIS_URL,
    )
    try:
        stack.start_portal()
        yield stack
    finally:
        stack.close()
        print(f"--- portal log ---\n{stack.log_tail('portal', 60)}")
