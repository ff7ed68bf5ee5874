"""The pool's utilisation, read with one aggregate query (no engine snapshot), and the
console's overview of where the pool stands."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Q, Sum

from ..choices import ON_NODE_STATES, WAITING_STATES
from ..models import Allocation, Node, PoolPolicy, Session, Slice


def pool_utilisation() -> float:
    """Share of the pool's GPU capacity (milli) held by sessions on their nodes.

    The same figure the engine computes from a snapshot (``engine.utilisation``): slices held
    by sessions over those plus the free ones; slices held otherwise (a warm desktop, a
    stopping session) count as neither.
    """
    present = Slice.objects.filter(present=True, gpu__present=True)
    live = Allocation.objects.filter(released_at=None, slice__isnull=False)
    held_by_sessions = live.filter(session__state__in=ON_NODE_STATES).values("slice_id")
    figures = present.aggregate(  # one query: every submit for a hobby reads it
        held=Sum("milli", filter=Q(pk__in=held_by_sessions)),
        free=Sum("milli", filter=~Q(pk__in=live.values("slice_id"))),
    )
    held, free = figures["held"] or 0, figures["free"] or 0
    return held / (held + free) if held + free else 0.0


@dataclass(frozen=True)
class PoolOverview:
    nodes: int
    waiting: int
    utilisation: float  # 0..1
    alert_level: str


def pool_overview() -> PoolOverview:
    """What the console's front page shows."""
    return PoolOverview(
        nodes=Node.objects.count(),
        waiting=Session.objects.filter(state__in=WAITING_STATES).count(),
        utilisation=pool_utilisation(),
        alert_level=PoolPolicy.current().alert_level,
    )
