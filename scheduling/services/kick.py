"""Asking for a scheduling cycle, from any service, without importing the task module.

A class start asks for a cycle with each of its two hundred submissions. Each ask marks the
pool dirty (the running cycle, or the next, sees it); a task message goes only when none is
waiting to begin, so the worker gets a handful instead of two hundred. ``scheduling.tasks``
clears :data:`CYCLE_ASKED` as its cycle task begins, before it reads anything.
"""

from __future__ import annotations

import logging

import redis
from celery import current_app
from django.db import transaction

from ..redis_client import shared_redis

log = logging.getLogger(__name__)

# The task in ``scheduling.tasks``; sent by name so that services never import tasks (tasks
# import services).
CYCLE_TASK = "scheduling.tasks.run_scheduling_cycle"
CYCLE_TASK_EXPIRES_S = 60
CYCLE_DIRTY = "deskpool:cycle:dirty"  # something changed since the last cycle read the pool
CYCLE_ASKED = "deskpool:cycle:asked"  # a cycle task is queued and has not begun
# A lost or expired task message holds later asks back at most this long (and the beat's
# cycle runs regardless).
CYCLE_ASKED_S = 5


def schedule_soon() -> None:
    """Ask for a scheduling cycle once the current transaction commits."""
    transaction.on_commit(_send)


def _send() -> None:
    try:
        pipe = shared_redis().pipeline(transaction=False)  # one round trip for the two
        pipe.set(CYCLE_DIRTY, 1)
        pipe.set(CYCLE_ASKED, 1, nx=True, ex=CYCLE_ASKED_S)
        if not pipe.execute()[1]:
            return  # the queued task begins after this commit: its cycle sees it
    except redis.RedisError as error:
        log.warning("cycle ask not coalesced (%s); sending the task", error)
    current_app.send_task(CYCLE_TASK, expires=CYCLE_TASK_EXPIRES_S)
