"""GPU idle allocated hours per course and department (the console's idle page, issue 15).

For the runs (usage records, ``services.accounting``) that started in the period, as the
usage reports count them: the GPU-hours allocated (GPUs held x hours; a closed run's stored
``gpu_hours``, an open run's up to now) and the GPU-hours of those during which the agent's
samples found the GPU idle (``UsageRecord.gpu_idle_seconds``, added up by
``session_activity.count_gpu_idle``). Grouped by the course and the department the record
kept at the run's start (``usage.department_of``: the person's, else the course's). One
aggregate query per table.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Count, DurationField, ExpressionWrapper, F, Q, Sum, Value
from django.utils import timezone
from django.utils.translation import gettext as _

from ..models import UsageRecord
from . import ServiceError

DEFAULT_DAYS = 7
MIN_DAYS, MAX_DAYS = 1, 90


@dataclass(frozen=True)
class IdleHoursRow:
    """One course's or department's allocated and idle GPU-hours in the period."""

    key: str
    runs: int
    gpu_hours: float
    idle_gpu_hours: float

    @property
    def idle_pct(self) -> float | None:
        """The idle share of the allocated hours, in percent; None with no hours."""
        if self.gpu_hours <= 0:
            return None
        return min(100.0, 100.0 * self.idle_gpu_hours / self.gpu_hours)


@dataclass(frozen=True)
class IdleHours:
    since: datetime
    until: datetime
    days: int
    courses: list[IdleHoursRow]
    departments: list[IdleHoursRow]


def check_days(days: int | None) -> int:
    """The period's length in days: 1 to 90, 7 when not given."""
    if days is None:
        return DEFAULT_DAYS
    if not MIN_DAYS <= days <= MAX_DAYS:
        raise ServiceError(
            _("Enter a number of days from %(low)s to %(high)s.")
            % {"low": MIN_DAYS, "high": MAX_DAYS},
            field="days",
        )
    return days


def _rows(group: str, since: datetime, now: datetime, exclude_blank: bool) -> list[IdleHoursRow]:
    runs = UsageRecord.objects.filter(started_at__gte=since, started_at__lt=now, gpu_share__gt=0)
    if exclude_blank:
        runs = runs.exclude(**{group: ""})
    open_held = ExpressionWrapper(
        F("gpu_share") * (Value(now) - F("started_at")), output_field=DurationField()
    )
    totals = (
        runs.values(group)
        .annotate(
            closed_hours=Sum("gpu_hours", filter=Q(ended_at__isnull=False)),
            open_held=Sum(open_held, filter=Q(ended_at__isnull=True)),
            idle_seconds=Sum("gpu_idle_seconds"),
            run_count=Count("pk"),
        )
        .order_by(group)
    )
    rows = []
    for total in totals:
        held: timedelta | None = total["open_held"]
        hours = float(total["closed_hours"] or 0) + (held.total_seconds() / 3600 if held else 0)
        rows.append(
            IdleHoursRow(
                key=total[group],
                runs=total["run_count"],
                gpu_hours=hours,
                idle_gpu_hours=min(hours, (total["idle_seconds"] or 0) / 3600),
            )
        )
    return rows


def idle_hours(days: int | None = None, now: datetime | None = None) -> IdleHours:
    """Allocated and idle GPU-hours per course (runs with a course) and per department (an
    empty key: runs of people with none), for runs started in the last ``days`` days."""
    days = check_days(days)
    now = now or timezone.now()
    since = now - timedelta(days=days)
    return IdleHours(
        since=since,
        until=now,
        days=days,
        courses=_rows("course_code", since, now, exclude_blank=True),
        departments=_rows("department", since, now, exclude_blank=False),
    )
