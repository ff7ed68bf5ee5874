"""Which desktop profiles the pool could ever run: the request form, the API and submit.

A profile that no healthy node of the pool could run even when empty (more CPUs or memory
than any node has; no slice of its kind, GPU memory, model or compute; more GPUs than any
node holds) is not offered as something that starts: the page and the API mark it
unavailable with the reason, and a request for it is refused. The rule is the scheduler's
own (``scheduling.engine.never_fits``, the one that gives a queued request ``NO_FIT``).

A pool with no healthy node at all says nothing about what it could run (the nodes may be
back in a minute): then every profile stays available and its requests wait.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from django.utils import timezone

from .. import engine
from ..engine.reasons import Reason
from ..models import DesktopProfile
from ..presenters import refusal, render_reason
from . import ServiceError
from .snapshot import pool_snapshot, profile_request


def never_fitting(profiles: Iterable[DesktopProfile], now: datetime) -> dict[int, Reason]:
    """Profile id -> why no healthy node could ever run it; profiles that could are left out."""
    snapshot, pool_models = pool_snapshot(now)
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
