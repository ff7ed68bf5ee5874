"""Which desktop profiles the pool could ever run: the request form, the API and submit.

A profile that no healthy node of the pool could run even when empty (more CPUs or memory
than any node has; no slice of its kind, GPU memory, model or compute; more GPUs than any
node holds) is not offered as something that starts: the page and the API mark it
unavailable with the reason, and a request for it is refused. The rule is the scheduler's
own (``scheduling.engine.never_fits``, the one that gives a queued request ``NO_FIT``).

A pool with no healthy node at all says nothing about what it could run (the nodes may be
back in a minute): then every profile stays available and its requests wait.

The pool read behind it (8 queries and ~6 ms of CPU on the demo pool) is kept by each process
while the nodes stay as they were (registrations, health, cordons, drains, present GPUs: one
query to tell, itself read at most once a moment per process: ``scheduling.recent``) and for
:data:`POOL_READ_KEEP_S` at most, so a storm of submits and home pages reads the pool once,
not once each.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from django.db import connection
from django.db.models import Count, Max, Q
from django.utils import timezone

from .. import engine
from ..engine.reasons import Reason
from ..models import DesktopProfile, Node
from ..presenters import refusal, render_reason
from ..recent import Recent
from . import ServiceError
from .snapshot import pool_snapshot, profile_request

POOL_READ_KEEP_S = 5.0  # at most this long, even when the nodes look unchanged
_kept: tuple[Any, float, Any] | None = None  # (nodes' state, monotonic time, pool read)


def _pool_state() -> tuple[Any, ...]:
    """What the verdicts depend on, in one query: each node's registration, whether it takes
    work now, and its present GPUs (the database's name too: one process, several test
    databases)."""
    now = timezone.now()
    rows = Node.objects.annotate(
        present_gpus=Count("gpus", filter=Q(gpus__present=True)), last_gpu=Max("gpus__pk")
    ).only("pk", "registered_at", "cordoned", "draining_since", "last_heartbeat")
    return (connection.settings_dict["NAME"],) + tuple(
        (n.pk, n.registered_at, n.is_healthy(now) and n.takes_new_work, n.present_gpus, n.last_gpu)
        for n in sorted(rows, key=lambda n: n.pk)
    )


# A class's submits all ask whether their profile could ever run: the nodes' state is read
# at most once a moment per process (scheduling.recent).
_recent_state = Recent(_pool_state)


def _pool_read(now: datetime):
    global _kept
    state = _recent_state()
    kept = _kept
    if kept is not None and kept[0] == state and time.monotonic() - kept[1] < POOL_READ_KEEP_S:
        return kept[2]
    read = pool_snapshot(now)
    _kept = (state, time.monotonic(), read)
    return read


def never_fitting(profiles: Iterable[DesktopProfile], now: datetime) -> dict[int, Reason]:
    """Profile id -> why no healthy node could ever run it; profiles that could are left out."""
    snapshot, pool_models = _pool_read(now)
    if not any(n.healthy for n in snapshot.nodes):
        return {}
    out = {}
    for profile in profiles:
        reason = engine.never_fits(snapshot, profile_request(profile, pool_models), now)
        if reason is not None:
            out[profile.pk] = reason
    return out


def unavailable_words(profiles: Iterable[DesktopProfile], now: datetime) -> dict[int, str]:
    """Profile id -> the reason it is unavailable, in the reader's language."""
    return {pk: render_reason(reason) for pk, reason in never_fitting(profiles, now).items()}


def check_profile_can_run(profile: DesktopProfile) -> None:
    """Refuse (ServiceError on ``profile``) a profile no healthy node could ever run."""
    reason = never_fitting([profile], timezone.now()).get(profile.pk)
    if reason is not None:
        raise ServiceError(refusal(reason), field="profile")
