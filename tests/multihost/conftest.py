"""The multi-host stack: a database of its own, the control plane, nginx and namespaces.

One stack for the whole package (it takes ~15 s to start): the storm's module and the
gateway's share it. Skips, saying why, when this is not
root, when network namespaces cannot be made, when nginx is not installed, or without the
real PostgreSQL and Redis (DATABASE_URL, REDIS_URL).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from tests.integration.stack import database_url_of, wait_for, write_fleet

from .netns import NGINX, MultiHost, netns_usable

SLICES_PER_GPU = 7
GPUS_PER_NODE = 5  # 35 MIG slices a node, 70 in all: the storm's 60 and test (a)'s one fit
NODES = ["node1", "node2"]


@pytest.fixture(scope="package")
def multihost_ready():
    """Skip unless this machine can run the multi-host test."""
    from django.conf import settings
    from django.db import connection

    why = netns_usable()
    if why:
        pytest.skip(why)
    if not os.access(NGINX, os.X_OK):
        pytest.skip("nginx is not installed (apt-get install nginx; .ci/run does)")
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    if settings.EMBEDDED or connection.vendor != "postgresql":
        pytest.skip("the multi-host test needs PostgreSQL and Redis: set DATABASE_URL, REDIS_URL")


@pytest.fixture(scope="package")
def multihost_db(multihost_ready, django_db_blocker):
    """A database of the package's own (``<name>_multihost``), migrated, dropped at the end."""
    from django.db import connection

    with django_db_blocker.unblock():
        original = connection.settings_dict["NAME"]
        test_settings = connection.settings_dict["TEST"]
        earlier = test_settings.get("NAME")
        test_settings["NAME"] = f"{original}_multihost"
        # A connection pool made earlier in the session (pytest-django's database) still
        # points at that database, and create_test_db would migrate through it: drop it
        # first, so that the pool is made again for the new name.
        if hasattr(connection, "close_pool"):
            connection.close()
            connection.close_pool()
        connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
        try:
            yield database_url_of(connection.settings_dict)
        finally:
            connection.creation.destroy_test_db(original, verbosity=0)
            test_settings["NAME"] = earlier


@pytest.fixture(scope="package")
def orm_module(multihost_db, django_db_blocker):
    with django_db_blocker.unblock():
        yield


@pytest.fixture
def orm(orm_module, django_db_blocker):
    """The test may use the ORM (on the package's own database)."""
    with django_db_blocker.unblock():
        yield


@pytest.fixture(scope="package")
def multihost(multihost_db, orm_module, request):
    """The running stack, with one registered agent in each node namespace."""
    from django.conf import settings

    from bench.class_start import bench_profile
    from scheduling.models import Slice
    from scheduling.services.nodes import do_create_join_token

    def flush_redis() -> None:
        """Redis as a fresh session has it: no lock an earlier test (or a worker the storm
        killed) left held, no queued task."""
        import redis

        for url in (settings.CELERY_BROKER_URL, settings.LOCK_REDIS_URL):
            redis.Redis.from_url(url).flushdb()

    flush_redis()
    workdir = Path(tempfile.mkdtemp(prefix="deskpool-multihost-"))
    workdir.chmod(0o755)  # nginx's workers (nobody) read the collected static files
    stack = MultiHost(workdir, multihost_db, settings.REDIS_URL)
    try:
        stack.start()
        stack.profile = bench_profile()
        for node in NODES:
            fleet = write_fleet(workdir / f"fleet-{node}.yaml", node, SLICES_PER_GPU, GPUS_PER_NODE)
            stack.start_agent(node, do_create_join_token(node, actor="test"), fleet)
        wait_for(
            lambda: (
                Slice.objects.filter(
                    gpu__node__hostname__in=NODES,
                    gpu__node__last_heartbeat__isnull=False,
                    present=True,
                    gpu__present=True,
                ).count()
                == len(NODES) * GPUS_PER_NODE * SLICES_PER_GPU
            ),
            60,
            "both agents' registration, heartbeat and slices (through nginx)",
        )
        yield stack
    finally:
        stack.close()
        flush_redis()
        if request.session.testsfailed:
            for log in sorted(stack.logs.glob("*.log")):
                print(f"--- {log.name} ---\n{stack.log_tail(log.stem)}")
        keep = os.environ.get("DESKPOOL_MULTIHOST_KEEP")
        if keep:
            shutil.rmtree(keep, ignore_errors=True)
            shutil.copytree(stack.logs, keep)
        shutil.rmtree(workdir, ignore_errors=True)
