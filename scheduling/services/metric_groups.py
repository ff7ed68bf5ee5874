"""The series of groups of GPUs (the pool, a GPU model, a node, a rack) and the queue's series
by tier, computed at each rollup period (``record_pool_metrics``) from the GPUs' samples
of that period and the sessions. They are ordinary sources (docs/metrics.md), rolled up and
pruned as the rest, so the history pages read one series per group instead of adding up
a thousand GPUs' rollups on every page view.

A group's device metrics over the period: ``utilization_pct`` the mean over its GPUs (each
GPU's mean first), ``memory_used_mb`` and ``power_w`` the sum of its GPUs' means,
``temperature_c`` the hottest GPU's mean. A rack's ``power_budget_w`` is its nodes' label
``rack_power_budget_w`` (the largest, as the rack-power alert reads it).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db.models import Avg, Count

from ..choices import WAITING_STATES, Purpose
from ..models import Gpu, MetricSample, MetricSource, Session
from ..sim.campus.report import percentile  # the nearest-rank percentile

GROUP_PREFIXES = ("model", "node", "rack")


def group_key(prefix: str, name: str) -> str:
    """A group's source key: ``model:<model>``, ``node:<hostname>`` or ``rack:<rack>``."""
    return f"{prefix}:{name}"[:100]


def rack_budgets(labels: Iterable[dict[str, Any]]) -> dict[str, float]:
    """Each rack's power budget from its nodes' labels (the largest a node states)."""
    budgets: dict[str, float] = {}
    for node_labels in labels:
        rack, budget = node_labels.get("rack"), node_labels.get("rack_power_budget_w")
        if rack and budget:
            try:
                budgets[str(rack)] = max(budgets.get(str(rack), 0.0), float(budget))
            except (TypeError, ValueError):
                continue
    return budgets


@dataclass
class _Group:
    utilisation: list[float] = field(default_factory=list)
    memory: float | None = None
    power: float | None = None
    temperature: float | None = None

    def add(self, row: Mapping[str, Any]) -> None:
        if row["u"] is not None:
            self.utilisation.append(row["u"])
        if row["m"] is not None:
            self.memory = (self.memory or 0.0) + row["m"]
        if row["p"] is not None:
            self.power = (self.power or 0.0) + row["p"]
        if row["t"] is not None:
            self.temperature = max(self.temperature or row["t"], row["t"])

    def values(self) -> dict[str, float | None]:
        mean = sum(self.utilisation) / len(self.utilisation) if self.utilisation else None
        return {
            "utilization_pct": mean,
            "memory_used_mb": self.memory,
            "power_w": self.power,
            "temperature_c": self.temperature,
        }


def group_rows(
    since: datetime, now: datetime, pool_key: str
) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, float | None]]]:
    """The groups' sources (key -> kind, node) and their device metrics over [since, now),
    from the GPU samples of that period (one aggregate query, one query for the GPUs)."""
    means = (
        MetricSample.objects.filter(
            time__gte=since, time__lt=now, source__kind=MetricSource.Kind.GPU
        )
        .order_by()
        .values("source__key")
        .annotate(
            u=Avg("utilization_pct"),
            m=Avg("memory_used_mb"),
            p=Avg("power_w"),
            t=Avg("temperature_c"),
        )
    )
    by_uuid = {row["source__key"]: row for row in means}
    gpus = list(Gpu.objects.filter(uuid__in=by_uuid).select_related("node"))
    groups: dict[str, _Group] = defaultdict(_Group)
    wanted: dict[str, dict[str, Any]] = {}
    budgets = rack_budgets(gpu.node.labels for gpu in gpus if isinstance(gpu.node.labels, dict))
    for gpu in gpus:
        labels = gpu.node.labels if isinstance(gpu.node.labels, dict) else {}
        keys = [pool_key, group_key("model", gpu.model), group_key("node", gpu.node.hostname)]
        wanted[keys[1]] = {"kind": MetricSource.Kind.GROUP}
        wanted[keys[2]] = {"kind": MetricSource.Kind.GROUP, "node": gpu.node}
        if labels.get("rack"):
            keys.append(group_key("rack", str(labels["rack"])))
            wanted[keys[3]] = {"kind": MetricSource.Kind.GROUP}
        for key in keys:
            groups[key].add(by_uuid[gpu.uuid])
    values = {key: group.values() for key, group in groups.items()}
    for rack, budget in budgets.items():
        if group_key("rack", rack) in values:
            values[group_key("rack", rack)]["power_budget_w"] = budget
    return wanted, values


@dataclass(frozen=True)
class TierStats:
    waiting: int
    wait_mean_s: float | None
    wait_p95_s: float | None


def tier_stats(since: datetime, now: datetime) -> dict[str, TierStats]:
    """Per tier: the requests waiting now, and the mean and 95th percentile (nearest rank) of
    submit to placement of the requests placed in [since, now)."""
    waits: dict[str, list[float]] = defaultdict(list)
    placed = Session.objects.filter(placed_at__gte=since, placed_at__lt=now).values_list(
        "purpose", "created_at", "placed_at"
    )
    for purpose, created, placed_at in placed:
        if placed_at is not None:
            waits[purpose].append((placed_at - created).total_seconds())
    counts = dict(
        Session.objects.filter(state__in=WAITING_STATES)
        .order_by()
        .values_list("purpose")
        .annotate(n=Count("pk"))
    )
    stats = {}
    for tier in Purpose:
        mine = waits.get(tier.value, [])
        stats[tier.value] = TierStats(
            waiting=counts.get(tier.value, 0),
            wait_mean_s=sum(mine) / len(mine) if mine else None,
            wait_p95_s=percentile(mine, 95),
        )
    return stats


__all__ = ["GROUP_PREFIXES", "TierStats", "group_key", "group_rows", "tier_stats"]
