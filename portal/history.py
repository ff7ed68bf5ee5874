"""A person's past desktops and GPU-hours, counted as ``scheduling.services.usage`` counts them:
``compute_units x hours`` from ``started_at`` to ``ended_at`` (or now)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timedelta

from django.contrib.auth.models import User
from django.db.models import Q
from django.utils import timezone

from scheduling.choices import TERMINAL_STATES
from scheduling.models import Session


@dataclass(frozen=True)
class PastSession:
    session: Session
    gpu_hours: float


@dataclass(frozen=True)
class DayUsage:
    day: date  # in the reader's time zone
    gpu_hours: float


def gpu_hours(
    session: Session,
    now: datetime,
    since: datetime | None = None,
    until: datetime | None = None,
) -> float:
    """The session's GPU-hours (between ``since`` and ``until`` when given); CPU-only
    desktops use none."""
    if session.started_at is None or not session.compute_units:
        return 0.0
    start = max(session.started_at, since) if since else session.started_at
    end = min(session.ended_at or now, until) if until else (session.ended_at or now)
    return session.compute_units * max(0.0, (end - start).total_seconds() / 3600.0)


def past_sessions(user: User, now: datetime, limit: int = 50) -> list[PastSession]:
    """The person's ended desktops, newest first, with their GPU-hours."""
    sessions = (
        Session.objects.filter(user=user, state__in=TERMINAL_STATES)
        .select_related("profile")
        .order_by("-created_at")[:limit]
    )
    return [PastSession(s, round(gpu_hours(s, now), 2)) for s in sessions]


def daily_gpu_hours(user: User, now: datetime, days: int = 14) -> list[DayUsage]:
    """GPU-hours per day of the last ``days`` days (today last), days in the active zone."""
    today = timezone.localdate(now)
    first = today - timedelta(days=days - 1)
    starts = [
        timezone.make_aware(datetime.combine(first + timedelta(days=i), datetime.min.time()))
        for i in range(days + 1)
    ]
    sessions = Session.objects.filter(user=user, started_at__isnull=False).filter(
        Q(ended_at__isnull=True) | Q(ended_at__gte=starts[0])
    )
    hours = [0.0] * days
    for s in sessions:
        for i in range(days):
            hours[i] += gpu_hours(s, now, since=starts[i], until=min(starts[i + 1], now))
    return [DayUsage(first + timedelta(days=i), round(h, 2)) for i, h in enumerate(hours)]
