"""A person's past desktops and GPU-hours, counted as ``scheduling.services.usage`` counts them
for the quota: ``compute_units x hours`` of every run (its usage records: a requeued session
keeps the hours of its earlier runs), or of the session itself when it has no record."""

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
    """The session's GPU-hours over all its runs (between ``since`` and ``until`` when
    given); CPU-only desktops use none. Expects ``usage_records`` prefetched."""
    runs = [(r.compute_units, r.started_at, r.ended_at) for r in session.usage_records.all()]
    if not runs and session.started_at is not None:
        runs = [(session.compute_units, session.started_at, session.ended_at)]
    total = 0.0
    for units, started, ended in runs:
        start = max(started, since) if since else started
        end = min(ended or now, until) if until else (ended or now)
        total += units * max(0.0, (end - start).total_seconds() / 3600.0)
    return total


def past_sessions(user: User, now: datetime, limit: int = 50) -> list[PastSession]:
    """The person's ended desktops, newest first, with their GPU-hours."""
    sessions = (
        Session.objects.filter(user=user, state__in=TERMINAL_STATES)
        .select_related("profile")
        .prefetch_related("usage_records")
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
    sessions = (
        Session.objects.filter(user=user)
        .filter(Q(started_at__isnull=False) | Q(usage_records__isnull=False))
        .filter(Q(ended_at__isnull=True) | Q(ended_at__gte=starts[0]))
        .distinct()
        .prefetch_related("usage_records")
    )
    hours = [0.0] * days
    for s in sessions:
        for i in range(days):
            hours[i] += gpu_hours(s, now, since=starts[i], until=min(starts[i + 1], now))
    return [DayUsage(first + timedelta(days=i), round(h, 2)) for i, h in enumerate(hours)]
