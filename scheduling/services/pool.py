"""The pool's utilisation, read with one aggregate query (no engine snapshot), the pool's one
admission threshold, and the console's overview of where the pool stands.

The admission threshold is the "Pool usage" alert rule (metric ``pool_usage``, scope ``pool``;
one per pool, edited on the console's alerts page, each edit audited as ``alert.rule_changed``):
its warning level is the pool's warning, its critical level the level at which new hobby
requests are refused (``engine.admission_block``), and its open alert is the pool's alert level.
Admission, the alert, ``/metrics``, the API and the console all read it from here
(docs/scheduling.md, docs/alerts.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import OuterRef, Q, Subquery, Sum

from .. import engine
from ..choices import ON_NODE_STATES, WAITING_STATES
from ..models import Alert, AlertRule, Allocation, Node, Session, Slice
from ..models.alerts import AlertLevel, Metric, Scope
from ..recent import Recent

# The levels of a pool without a "Pool usage" rule (a new pool, before its default rules are
# made): percent of the pool's GPU capacity in use.
DEFAULT_WARN_PERCENT = 80.0
DEFAULT_BLOCK_PERCENT = 90.0
# The pool's alert level, in the words of the API and /metrics, from the rule's open alert.
POOL_LEVELS = ("ok", "warn", "block")
_LEVEL_OF_ALERT = {AlertLevel.WARNING: "warn", AlertLevel.CRITICAL: "block"}


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
class Admission:
    """The pool's admission threshold: the "Pool usage" rule's levels, in percent."""

    warn_percent: float
    block_percent: float
    rule_id: int | None  # None: no such rule (the defaults apply)


def admission_rule() -> AlertRule | None:
    """The pool's one "Pool usage" rule (the first, should there ever be more), with the
    level of its open alert as ``open_level`` (None: none open); one query."""
    rules = AlertRule.objects.filter(metric=Metric.POOL_USAGE, scope=Scope.POOL)
    open_alert = Alert.objects.open().filter(rule=OuterRef("pk")).order_by("-pk")
    rules = rules.annotate(open_level=Subquery(open_alert.values("level")[:1]))
    return rules.order_by("pk").first()


def pool_state() -> tuple[Admission, str]:
    """The warning and block levels that admission, the alert and /metrics use, and the pool's
    alert level (``ok``, ``warn`` or ``block``: the level of the rule's open alert).

    Enabled or not, the rule's levels hold (disabling it stops its alert and e-mails only); a
    level left blank (only data older than migration 0031 can have one) is the default."""
    rule = admission_rule()
    if rule is None:
        return Admission(DEFAULT_WARN_PERCENT, DEFAULT_BLOCK_PERCENT, None), "ok"
    block = rule.critical if rule.critical is not None else DEFAULT_BLOCK_PERCENT
    warn = rule.warning if rule.warning is not None else min(DEFAULT_WARN_PERCENT, block)
    level = getattr(rule, "open_level", None)
    word = "ok" if level is None else _LEVEL_OF_ALERT.get(AlertLevel(level), "ok")
    return Admission(warn, block, rule.pk), word


def admission() -> Admission:
    """The pool's admission threshold (:func:`pool_state`)."""
    return pool_state()[0]


def admission_refusal(tier: int) -> engine.Reason | None:
    """Why a new request of this tier is refused now by the pool's admission threshold (the
    rule's block level against the pool's utilisation; only hobby is ever refused), or None.
    The rule and the utilisation, which a class's submits all read, are read at most once a
    moment per process (:mod:`scheduling.recent`)."""
    if not engine.admission_may_block(tier):
        return None
    return engine.admission_block(tier, _recent_utilisation(), _recent_policy())


def admission_policy() -> engine.Policy:
    """The engine's policy holding the admission threshold (ratios 0..1 of the "Pool usage"
    rule's levels, the one threshold; one query), its other knobs the engine's defaults:
    :func:`~scheduling.services.snapshot.engine_policy` fills those from the pool policy."""
    levels = admission()
    return engine.Policy(
        warn_utilisation=levels.warn_percent / 100, block_utilisation=levels.block_percent / 100
    )


_recent_utilisation = Recent(pool_utilisation)
_recent_policy = Recent(admission_policy)


def pool_alert_level() -> str:
    """``ok``, ``warn`` or ``block``: the level of the "Pool usage" rule's open alert."""
    return pool_state()[1]


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
        alert_level=pool_alert_level(),
    )
