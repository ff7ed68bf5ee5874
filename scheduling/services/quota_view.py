"""What is left of a person's quotas, counted as the scheduler counts it."""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth.models import User
from django.utils import timezone

from ..choices import ON_NODE_STATES, TERMINAL_STATES
from ..models import Session
from .quota_requests import extra_gpu_hours
from .sessions import MAX_OPEN_SESSIONS_PER_USER
from .snapshot import engine_quota, quota_row
from .usage import collect_usage


@dataclass(frozen=True)
class QuotaLeft:
    """A person's sessions and weekly GPU-hours against their user quota (None: no limit)."""

    open_sessions: int
    max_open_sessions: int
    holding: int  # desktops holding capacity now
    max_concurrent: int | None
    gpu_hours_week: float  # used over the last 7 days
    max_gpu_hours_week: float | None  # including granted extra hours
    extra_gpu_hours: float  # granted over the last 7 days

    @property
    def hours_left(self) -> float | None:
        if self.max_gpu_hours_week is None:
            return None
        return max(0.0, self.max_gpu_hours_week - self.gpu_hours_week)


def quota_left(user: User) -> QuotaLeft:
    """The person's quota use, from the same rows and counts as the submit check and the
    engine's snapshot (``snapshot.quota_row`` / ``snapshot.engine_quota``)."""
    now = timezone.now()
    username = user.get_username()
    usage = collect_usage(now, 7.0, ON_NODE_STATES, scopes=[("user", username)])
    extra = extra_gpu_hours(now)
    row = quota_row("user", username)
    quota = engine_quota(row, "user", username, usage, extra) if row is not None else None
    open_sessions = Session.objects.filter(user=user).exclude(state__in=TERMINAL_STATES).count()
    return QuotaLeft(
        open_sessions=open_sessions,
        max_open_sessions=MAX_OPEN_SESSIONS_PER_USER,
        holding=usage.holding.get(("user", username), 0),
        max_concurrent=quota.max_sessions if quota else None,
        gpu_hours_week=round(usage.week.get(("user", username), 0.0), 4),
        max_gpu_hours_week=quota.max_gpu_hours_week if quota else None,
        extra_gpu_hours=extra.get(username, 0.0),
    )
