from __future__ import annotations

import pytest

from .stack import Stack, docker_client, image_present


def database_url() -> str:
    from django.db import connection

    s = connection.settings_dict
    if s["ENGINE"] != "django.db.backends.postgresql":
        pytest.skip("the integration tests run on PostgreSQL: set DATABASE_URL")
    password = f":{s['PASSWORD']}" if s.get("PASSWORD") else ""
    host = f"{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}"
    return f"postgres://{s['USER']}{password}@{host}/{s['NAME']}"


@pytest.fixture
def docker_engine():
    client = docker_client()
    if client is None:
        pytest.skip("no Docker engine answers (start dockerd; .ci/run does)")
    return client


@pytest.fixture
def stack_options() -> dict:
    """Keyword arguments for :class:`Stack` (node name, extra env); override per module."""
    return {}


@pytest.fixture
def stack(transactional_db, tmp_path, request, stack_options):
    from django.conf import settings

    if settings.EMBEDDED:
        pytest.skip("the integration tests need the real Redis: set REDIS_URL")
    running = Stack(tmp_path, database_url(), settings.REDIS_URL, **stack_options)
    client = docker_client()
    try:
        running.start_portal_and_worker()
        yield running
    finally:
        running.close(client)
        failed = getattr(request.node, "rep_call", None)
        if failed is not None and failed.failed:
            for name in ["portal", "worker", *sorted(running.agent_envs)]:
                print(f"--- {name} log ---\n{running.log_tail(name)}")


@pytest.fixture
def require_image(docker_engine):
    def require(image: str) -> None:
        if not image_present(docker_engine, image):
            pytest.skip(f"{image} is not built: run `bash nodeagent/images/build.sh all`")

    return require


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report
