"""Asking for a scheduling cycle, from any service, without importing the task module."""

from __future__ import annotations

from celery import current_app
from django.db import transaction

# The task in ``scheduling.tasks``; sent by name so that services never import tasks (tasks
# import services).
CYCLE_TASK = "scheduling.tasks.run_scheduling_cycle"
CYCLE_TASK_EXPIRES_S = 60


def schedule_soon() -> None:
    """Ask for a scheduling cycle once the current transaction commits."""
    transaction.on_commit(_send)


def _send() -> None:
    current_app.send_task(CYCLE_TASK, expires=CYCLE_TASK_EXPIRES_S)
