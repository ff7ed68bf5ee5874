"""Celery tasks of the resource side. Short, idempotent, enqueued after commit."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress

import redis
from celery import shared_task
from django.utils import timezone
from redis.exceptions import LockError
from redis.lock import Lock

from .redis_client import shared_redis
from .services.alerts import evaluate_alerts
from .services.audit import do_prune_audit
from .services.cycle import do_scheduling_cycle
from .services.gateway_tickets import do_purge_gateway_tickets
from .services.health import do_sweep_silent_nodes
from .services.idle import do_idle_sweep
from .services.kick import CYCLE_ASKED, CYCLE_DIRTY
from .services.metric_history import do_metric_rollups
from .services.metrics import observe_cycle_duration

log = logging.getLogger(__name__)

CYCLE_LOCK = "deskpool:cycle:lock"
# The lock expires this long after its holder stops renewing it (renewed every third of it
# while a cycle runs): a worker killed mid-cycle holds cycles up for at most this long.
CYCLE_LOCK_S = 15.0


@contextmanager
def renewed(lock: Lock) -> Iterator[None]:
    """Keep ``lock`` from expiring while the body runs."""
    done = threading.Event()

    def renew() -> None:
        while not done.wait(CYCLE_LOCK_S / 3):
            try:
                lock.reacquire()
            except (LockError, redis.RedisError) as error:
                log.warning("cycle lock not renewed: %s", error)

    renewer = threading.Thread(target=renew, name="cycle-lock", daemon=True)
    renewer.start()
    try:
        yield
    finally:
        done.set()
        renewer.join()


@shared_task(name="scheduling.tasks.run_scheduling_cycle", ignore_result=True, expires=60)
def run_scheduling_cycle() -> int:
    """Single-flight per pool: a cycle asked for while one runs makes that one go again.

    Services ask for it by name (``services.kick.schedule_soon``)."""
    client = shared_redis()
    # Asks from now on send a task of their own (services.kick): this one may have read
    # the pool before their commit.
    client.delete(CYCLE_ASKED)
    client.set(CYCLE_DIRTY, 1)
    cycles = 0
    while client.get(CYCLE_DIRTY):
        lock = client.lock(CYCLE_LOCK, timeout=CYCLE_LOCK_S, blocking=False, thread_local=False)
        if not lock.acquire():
            return cycles  # the holder sees the dirty flag and runs again
        try:
            while client.getdel(CYCLE_DIRTY):
                started = time.monotonic()
                with renewed(lock):
                    result = do_scheduling_cycle()
                observe_cycle_duration(time.monotonic() - started)  # /metrics
                cycles += 1
                if result.conflicts:
                    client.set(CYCLE_DIRTY, 1)
        finally:
            with suppress(LockError):  # expired (a stalled worker): another may hold it now
                lock.release()
    return cycles


@shared_task(ignore_result=True, expires=15)
def sweep_nodes() -> int:
    """Requeue the sessions of nodes that stopped answering; returns how many moved."""
    result = do_sweep_silent_nodes(timezone.now())
    return result.requeued + result.ended


@shared_task(name="scheduling.tasks.run_alert_evaluation", ignore_result=True, expires=60)
def run_alert_evaluation() -> int:
    """Evaluate the alert rules once (docs/alerts.md); returns how many alerts changed."""
    result = evaluate_alerts(timezone.now())
    return len(result.raised) + len(result.escalated) + len(result.resolved)


@shared_task(name="scheduling.tasks.prune_audit", ignore_result=True)
def prune_audit() -> int:
    """The audit trail's retention: delete events older than the retention period (the only
    deletion the database allows, docs/audit.md), and the gateway tickets done with over a
    day ago (their opens are in the audit trail); returns how many events."""
    do_purge_gateway_tickets(timezone.now())
    return do_prune_audit()


@shared_task(name="scheduling.tasks.roll_up_metrics", ignore_result=True)
def roll_up_metrics() -> int:
    """Metric history (docs/monitoring.md): the pool's business sample, the 5-minute and
    hourly rollups, and pruning past each window; returns how many rollup rows were written."""
    result = do_metric_rollups(timezone.now())
    return result.five_minute_rows + result.hourly_rows


@shared_task(name="scheduling.tasks.run_idle_sweep", ignore_result=True)
def run_idle_sweep() -> int:
    """The idle policy and the time-limit warnings (docs/lifecycle.md); returns how many
    sessions were warned, suspended or ended."""
    result = do_idle_sweep(timezone.now())
    return result.warned + result.suspended + result.ended + result.limit_warnings
