"""What the pages show of the idle policy's verdicts: the sessions idle now (the console),
and when a warned session will be suspended (the session's pages and payload)."""

from __future__ import annotations

from datetime import datetime

from django.db.models import QuerySet

from ..choices import IdleState
from ..models import Session
from .idle_policies import policy_of


def sessions_idle_now() -> QuerySet[Session]:
    """Sessions the sweep found idle or warned, quiet the longest first."""
    return (
        Session.objects.filter(idle_state__in=[IdleState.IDLE, IdleState.WARNED])
        .select_related("user", "profile", "node")
        .order_by("idle_since", "pk")
    )


def suspends_at(session: Session) -> datetime | None:
    """When a warned session is suspended unless it is used: its warning (``idle_since``) plus
    its policy's ``suspend_after`` (the sweep suspends at its first pass from then on). None
    for a session not warned. One query, for a warned session only."""
    if session.idle_state != IdleState.WARNED or session.idle_since is None:
        return None
    return session.idle_since + policy_of(session).suspend_after
