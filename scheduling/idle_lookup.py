"""Which idle policy applies to a session (docs/lifecycle.md), and when a warned session is
suspended. Below the services and beside ``scheduling.events``, which puts the suspension
time in every session payload; the console's editing is ``services.idle_policies``."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime

from django.db.models import Q

from .choices import IdleState
from .models import IdlePolicy, Session
from .rules import idle_rules


def to_policy(row: IdlePolicy | None) -> idle_rules.Policy:
    if row is None:
        return idle_rules.Policy()
    return idle_rules.Policy(
        enabled=row.enabled,
        idle_after=row.idle_after,
        warn_after=row.warn_after,
        suspend_after=row.suspend_after,
        end_after=row.end_after,
        gpu_idle_pct=row.gpu_idle_pct,
        cpu_idle_pct=row.cpu_idle_pct,
        gpu_needs_viewer=row.gpu_needs_viewer,
    )


def policy_for(session: Session, rows: Iterable[IdlePolicy]) -> idle_rules.Policy:
    """The most specific policy: profile and purpose, then profile, then purpose, then any."""
    best: tuple[int, int] | None = None
    chosen = None
    for row in rows:
        if row.profile_id not in (None, session.profile_id):
            continue
        if row.purpose not in ("", session.purpose):
            continue
        rank = (2 if row.profile_id else 0) + (1 if row.purpose else 0)
        if best is None or (rank, -row.pk) > best:
            best, chosen = (rank, -row.pk), row
    return to_policy(chosen)


def policy_of(session: Session) -> idle_rules.Policy:
    """The policy for one session, reading only the rows that could apply to it."""
    rows = IdlePolicy.objects.filter(
        Q(profile=None) | Q(profile_id=session.profile_id), purpose__in=["", session.purpose]
    )
    return policy_for(session, rows)


def policies_of(sessions: Iterable[Session]) -> Mapping[int, idle_rules.Policy]:
    """The policy for each of many sessions, by session id: :func:`policy_for` over the rows
    that could apply to any of them, read in one query (none for no sessions)."""
    sessions = list(sessions)
    if not sessions:
        return {}
    rows = list(
        IdlePolicy.objects.filter(
            Q(profile=None) | Q(profile_id__in={s.profile_id for s in sessions}),
            purpose__in={"", *(s.purpose for s in sessions)},
        )
    )
    return {session.pk: policy_for(session, rows) for session in sessions}


def suspends_at(session: Session) -> datetime | None:
    """When a warned session is suspended unless it is used: its warning (``idle_since``) plus
    its policy's ``suspend_after`` (the sweep suspends at its first pass from then on). None
    for a session not warned. One query, for a warned session only."""
    if session.idle_state != IdleState.WARNED or session.idle_since is None:
        return None
    return session.idle_since + policy_of(session).suspend_after
