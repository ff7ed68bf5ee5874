"""The Celery app: broker on Redis, tasks discovered in each app's ``tasks.py``."""

from __future__ import annotations

import os

from celery import Celery
from django.conf import settings

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

app = Celery("deskpool")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@app.on_after_finalize.connect
def _beat_entries(sender: Celery, **_: object) -> None:
    every = settings.SCHEDULER_BEAT_SECONDS
    sender.add_periodic_task(
        every,
        sender.signature("scheduling.tasks.run_scheduling_cycle", options={"expires": every}),
        name="scheduling-cycle",
    )
    sweep = settings.NODE_SWEEP_SECONDS
    sender.add_periodic_task(
        sweep,
        sender.signature("scheduling.tasks.sweep_nodes", options={"expires": sweep}),
        name="node-health-sweep",
    )
    alerts = settings.ALERT_EVALUATION_SECONDS
    sender.add_periodic_task(
        alerts,
        sender.signature("scheduling.tasks.run_alert_evaluation", options={"expires": alerts}),
        name="alert-evaluation",
    )
    retention = settings.AUDIT_RETENTION_TASK_SECONDS
    sender.add_periodic_task(
        retention,
        sender.signature("scheduling.tasks.prune_audit", options={"expires": retention}),
        name="audit-retention",
    )
    rollups = settings.METRICS_ROLLUP_SECONDS
    sender.add_periodic_task(
        rollups,
        sender.signature("scheduling.tasks.roll_up_metrics", options={"expires": rollups}),
        name="metric-rollups",
    )
