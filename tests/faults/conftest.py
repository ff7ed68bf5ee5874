"""The integration stack (real daphne portal, Celery worker, agent processes, dockerd),
re-exported for the fault tests, on node names of their own."""

from __future__ import annotations

import uuid

import pytest

from ..integration.conftest import (  # noqa: F401 - fixtures and hook, re-exported
    docker_engine,
    pytest_runtest_makereport,
    require_image,
    stack,
)

# Unique per run: the stack removes every container labelled with its nodes on close, so
# two runs on one Docker engine (other engineers', CI) must not share node names.
FAULT_NODE = f"flt-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def stack_options() -> dict:
    return {"node": FAULT_NODE}


@pytest.fixture(autouse=True)
def _remove_fault_volumes(request):
    """The fault tests make many home volumes; the stack removes its nodes' ones on close."""
    if "stack" in request.fixturenames:
        request.getfixturevalue("stack").remove_volumes = True
    yield
