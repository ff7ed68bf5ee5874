"""The scheduling cycle task is single-flight: a cycle asked for during another one is not lost."""

from __future__ import annotations

import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families

from scheduling import tasks
from scheduling.choices import SessionState
from scheduling.models import Session
from scheduling.redis_client import shared_redis
from scheduling.services import kick
from scheduling.services.metrics import render_metrics
from scheduling.services.sessions import check_submit, do_submit

pytestmark = pytest.mark.django_db


@pytest.fixture
def lock_client():
    client = shared_redis()
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


def test_every_cycle_the_task_runs_is_counted_in_the_metrics_histogram(lock_client):
    def cycles_counted() -> float:
        families = text_string_to_metric_families(render_metrics().decode())
        [cycle] = [f for f in families if f.name == "deskpool_scheduling_cycle_duration_seconds"]
        return next(s.value for s in cycle.samples if s.name.endswith("_count"))

    before = cycles_counted()
    assert tasks.run_scheduling_cycle() == 1
    assert cycles_counted() == before + 1


def test_the_cycle_lock_is_renewed_while_a_cycle_runs_and_expires_after_a_dead_holder(
    lock_client, monkeypatch
):
    import time

    monkeypatch.setattr(tasks, "CYCLE_LOCK_S", 0.6)
    lock = lock_client.lock(tasks.CYCLE_LOCK, timeout=0.6, blocking=False, thread_local=False)
    assert lock.acquire()
    with tasks.renewed(lock):
        time.sleep(1.5)  # longer than the lock lives without renewal
        assert lock.owned()  # a long cycle keeps it
    # Its holder gone (killed: nobody renews, nobody releases), the lock frees itself.
    time.sleep(0.8)
    assert not lock.owned()
    assert lock_client.lock(tasks.CYCLE_LOCK, timeout=1, blocking=False).acquire()


def test_asks_for_a_cycle_while_one_is_queued_send_one_task_message(lock_client, settings):
    """Two hundred submissions send a handful of task messages, not two hundred: an ask
    while a cycle task waits to begin only marks the pool dirty; once the task begins (and
    may have read the pool already), the next ask sends a message of its own."""
    if settings.EMBEDDED:
        pytest.skip("the embedded broker is not the Redis list counted here")
    broker = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    broker.delete("celery")
    lock_client.delete(kick.CYCLE_ASKED)
    for _ in range(5):
        kick._send()
    assert broker.llen("celery") == 1
    assert lock_client.get(tasks.CYCLE_DIRTY) == b"1"
    assert tasks.run_scheduling_cycle() == 1  # the queued task begins (run here)
    assert lock_client.get(kick.CYCLE_ASKED) is None
    kick._send()
    assert broker.llen("celery") == 2
    broker.delete("celery")
    lock_client.delete(kick.CYCLE_ASKED)
