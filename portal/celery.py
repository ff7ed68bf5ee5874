"""The Celery app: broker on Redis, tasks discovered in each app's ``tasks.py``."""

from __future__ import annotations

import os

from celery import Celery, signals
from django.conf import settings

from portal.server.heap import settle_for_serving

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

app = Celery("deskpool")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


# The beat entries: (name, task, the setting holding its period in seconds). Each expires
# after one period, so a backlog never runs twice.
BEAT_ENTRIES = [
    ("scheduling-cycle", "scheduling.tasks.run_scheduling_cycle", "SCHEDULER_BEAT_SECONDS"),
    ("node-health-sweep", "scheduling.tasks.sweep_nodes", "NODE_SWEEP_SECONDS"),
    ("alert-evaluation", "scheduling.tasks.run_alert_evaluation", "ALERT_EVALUATION_SECONDS"),
    ("audit-retention", "scheduling.tasks.prune_audit", "AUDIT_RETENTION_TASK_SECONDS"),
    ("metric-rollups", "scheduling.tasks.roll_up_metrics", "METRICS_ROLLUP_SECONDS"),
    ("idle-sweep", "scheduling.tasks.run_idle_sweep", "IDLE_SWEEP_SECONDS"),
]


@app.on_after_finalize.connect
def _beat_entries(sender: Celery, **_: object) -> None:
    for name, task, setting in BEAT_ENTRIES:
        every = getattr(settings, setting)
        sender.add_periodic_task(
            every, sender.signature(task, options={"expires": every}), name=name
        )


@signals.worker_ready.connect
@signals.worker_process_init.connect
def _settle_for_serving(**_: object) -> None:
    """A worker (and each of a prefork pool's processes) leaves what start-up made out of
    its garbage collections, which run less often (portal.server.heap)."""
    settle_for_serving()
