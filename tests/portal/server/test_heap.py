"""Server processes leave what start-up made out of later garbage collections
(portal.server.heap)."""

from __future__ import annotations

import gc
import subprocess
import sys

import pytest

from portal.server.heap import YOUNG_THRESHOLD, settle_for_serving


@pytest.fixture
def collector():
    """The test process's collector as it was, restored afterwards."""
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


def test_settling_freezes_what_is_alive_and_collects_the_young_less_often(collector):
    before = [object()]  # a list is tracked by the collector
    assert any(o is before for o in gc.get_objects())
    settle_for_serving()
    after = [object()]
    tracked = gc.get_objects()
    assert not any(o is before for o in tracked)  # frozen: no collection walks it
    assert any(o is after for o in tracked)  # made later: collected as usual
    assert gc.get_freeze_count() > 0
    assert gc.get_threshold()[0] == YOUNG_THRESHOLD


def _in_new_process(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    return done.stdout.strip().splitlines()[-1]


def test_the_asgi_application_settles_once_built():
    seen = _in_new_process(
        "import gc, portal.asgi; print(gc.get_freeze_count() > 0, gc.get_threshold()[0])"
    )
    assert seen == f"True {YOUNG_THRESHOLD}"


def test_a_celery_worker_and_each_of_its_processes_settle_once_ready():
    seen = _in_new_process(
        "import gc; from celery import signals; from portal.celery import app; "
        "before = gc.get_freeze_count(); signals.worker_process_init.send(sender='w'); "
        "print(before == 0, gc.get_freeze_count() > 0, gc.get_threshold()[0])"
    )
    assert seen == f"True True {YOUNG_THRESHOLD}"
