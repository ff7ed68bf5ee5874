"""What the console shows of the idle policy's verdicts: the sessions idle now. (When a warned
session will be suspended: ``scheduling.idle_lookup.suspends_at``.)"""

from __future__ import annotations

from django.db.models import QuerySet

from ..choices import IdleState
from ..models import Session


def sessions_idle_now() -> QuerySet[Session]:
    """Sessions the sweep found idle or warned, quiet the longest first."""
    return (
        Session.objects.filter(idle_state__in=[IdleState.IDLE, IdleState.WARNED])
        .select_related("user", "profile", "node")
        .order_by("idle_since", "pk")
    )
