"""Usage accounting: GPU-hours in compute units, over a week and decayed for fair share.

Usage is counted from the usage records (``services.accounting``), one per run of a session:
``compute_units x hours`` from the run's start to its end (or now, while it runs), where
``compute_units`` is the sum over its slices of the GPU's CU times the slice's part of it
(stored on the session when it is placed). A preempted or requeued session keeps the usage
of its earlier runs. A session with no record at all (one from before the records, or made
by hand) is counted from its own ``started_at`` and ``compute_units``, as before. CPU-only
desktops use no GPU-hours.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db.models import Exists, OuterRef, Q

from ..models import Session, UsageRecord

WEEK = timedelta(days=7)


@dataclass
class Usage:
    """GPU-hours per user, course and department: last 7 days, and decayed (fair share)."""

    week: dict[tuple[str, str], float] = field(default_factory=lambda: defaultdict(float))
    decayed_by_user: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    holding: dict[tuple[str, str], int] = field(default_factory=lambda: defaultdict(int))


def _overlap_hours(start: datetime, end: datetime, since: datetime) -> float:
    return max(0.0, (end - max(start, since)).total_seconds() / 3600.0)


def scope_keys(session: Session) -> Iterable[tuple[str, str]]:
    yield ("user", session.user.get_username())
    if session.course_code:
        yield ("course", session.course_code)
    department = department_of(session)
    if department:
        yield ("department", department)


def department_of(session: Session) -> str:
    member = getattr(session.user, "member", None)
    if member is not None and member.department:
        return member.department
    return session.course.department if session.course_id and session.course else ""


def collect_usage(
    now: datetime,
    half_life_days: float,
    holding_states: Iterable[str],
    scopes: Iterable[tuple[str, str]] | None = None,
) -> Usage:
    """Read the sessions of the last four half-lives (at least a week) once; with
    ``scopes``, only those that count in one of them (a submit checks its own quotas, not
    the whole pool's)."""
    horizon = now - max(WEEK, timedelta(days=4 * half_life_days))
    holding = set(holding_states)
    usage = Usage()
    decay = math.log(2) / (half_life_days * 86400) if half_life_days > 0 else 0.0

    def count(keys: list[tuple[str, str]], units: float, start: datetime, end: datetime) -> None:
        week_hours = _overlap_hours(start, end, now - WEEK)
        for key in keys:
            usage.week[key] += units * week_hours
        hours = _overlap_hours(start, end, horizon)
        age_s = max(0.0, (now - end).total_seconds())
        usage.decayed_by_user[keys[0][1]] += units * hours * math.exp(-decay * age_s)

    recorded = UsageRecord.objects.filter(session_id=OuterRef("pk"))
    sessions = (
        Session.objects.filter(Q(ended_at__isnull=True) | Q(ended_at__gte=horizon))
        .filter(Q(started_at__isnull=False) | Q(state__in=holding))
        .annotate(recorded=Exists(recorded))
        .select_related("user", "user__member", "course")
        .order_by()  # summed: in no order (the models' own would be built and sorted)
    )
    runs = UsageRecord.objects.filter(
        Q(ended_at__isnull=True) | Q(ended_at__gte=horizon)
    ).order_by()
    if scopes is not None:
        only_sessions, only_runs = _in_scopes(list(scopes))
        sessions, runs = sessions.filter(only_sessions), runs.filter(only_runs)
    for s in sessions:
        keys = list(scope_keys(s))
        if s.state in holding:
            for key in keys:
                usage.holding[key] += 1
        if s.recorded or not s.started_at or not s.compute_units:
            continue  # its runs are counted from its records below
        count(keys, s.compute_units, s.started_at, s.ended_at or now)
    for run in runs.exclude(compute_units=0):
        keys = list(record_keys(run))
        count(keys, run.compute_units, run.started_at, run.ended_at or now)
    return usage


def _in_scopes(scopes: list[tuple[str, str]]) -> tuple[Q, Q]:
    """Filters of sessions and of usage records that count in any of ``scopes`` (a
    superset for departments: :func:`scope_keys` then counts each where it belongs)."""
    sessions, runs = Q(pk__in=[]), Q(pk__in=[])
    for scope, key in scopes:
        if scope == "user":
            sessions |= Q(user__username=key)
            runs |= Q(username=key)
        elif scope == "course":
            sessions |= Q(course__code=key)
            runs |= Q(course_code=key)
        elif scope == "department":
            sessions |= Q(user__member__department=key) | Q(course__department=key)
            runs |= Q(department=key)
    return sessions, runs


def record_keys(record: UsageRecord) -> Iterable[tuple[str, str]]:
    """The scopes a run counts in, as the record kept them at its start."""
    yield ("user", record.username)
    if record.course_code:
        yield ("course", record.course_code)
    if record.department:
        yield ("department", record.department)
