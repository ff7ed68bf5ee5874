"""Usage accounting: GPU-hours in compute units, over a week and decayed for fair share.

A session's usage is ``compute_units x hours`` from ``started_at`` to ``ended_at`` (or now),
where ``compute_units`` is the sum over its slices of the GPU's CU times the slice's part of it
(stored on the session when it is placed). CPU-only desktops use no GPU-hours.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db.models import Q

from ..models import Session

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


def collect_usage(now: datetime, half_life_days: float, holding_states: Iterable[str]) -> Usage:
    """Read the sessions of the last four half-lives (at least a week) once."""
    horizon = now - max(WEEK, timedelta(days=4 * half_life_days))
    holding = set(holding_states)
    usage = Usage()
    sessions = (
        Session.objects.filter(Q(ended_at__isnull=True) | Q(ended_at__gte=horizon))
        .filter(Q(started_at__isnull=False) | Q(state__in=holding))
        .select_related("user", "user__member", "course")
    )
    decay = math.log(2) / (half_life_days * 86400) if half_life_days > 0 else 0.0
    for s in sessions:
        keys = list(scope_keys(s))
        if s.state in holding:
            for key in keys:
                usage.holding[key] += 1
        if not s.started_at or not s.compute_units:
            continue
        end = s.ended_at or now
        week_hours = _overlap_hours(s.started_at, end, now - WEEK)
        for key in keys:
            usage.week[key] += s.compute_units * week_hours
        hours = _overlap_hours(s.started_at, end, horizon)
        age_s = max(0.0, (now - end).total_seconds())
        usage.decayed_by_user[keys[0][1]] += s.compute_units * hours * math.exp(-decay * age_s)
    return usage
