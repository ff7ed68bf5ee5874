"""The scheduling cycle task is single-flight: a cycle asked for during another one is not lost."""

from __future__ import annotations

import pytest

from scheduling import tasks
from scheduling.choices import SessionState
from scheduling.models import Session
from scheduling.services.sessions import check_submit, do_submit

pytestmark = pytest.mark.django_db


@pytest.fixture
def lock_client():
    client = tasks.lock_client()
    client.delete(tasks.CYCLE_LOCK, tasks.CYCLE_DIRTY)
    yield client
    client.delete(tasks.CYCLE_LOCK, tasks.CYCLE_DIRTY)


def test_a_cycle_asked_for_while_one_holds_the_lock_leaves_it_to_the_holder(
    lock_client, owner, profile, pool
):
    session = do_submit(owner, check_submit(owner, profile.pk, "hobby", None))
    held = lock_client.lock(tasks.CYCLE_LOCK, timeout=30)
    assert held.acquire(blocking=False)
    try:
        assert tasks.run_scheduling_cycle() == 0
        assert lock_client.get(tasks.CYCLE_DIRTY) == b"1"  # the holder will run again
        assert Session.objects.get(pk=session.pk).state == SessionState.QUEUED
    finally:
        held.release()
    assert tasks.run_scheduling_cycle() == 1
    assert Session.objects.get(pk=session.pk).state == SessionState.PLACED
    assert lock_client.get(tasks.CYCLE_DIRTY) is None
