"""Metric history (docs/monitoring.md): samples written at every heartbeat, rolled up to 5-minute
and hourly buckets, pruned per resolution, and read back at the resolution a range needs.

Windows (settings): full resolution for ``METRICS_RAW_HOURS`` (48 h), 5-minute rollups for
``METRICS_5MIN_DAYS`` (30 days), hourly for ``METRICS_HOURLY_DAYS`` (396 days, 13 months).
The rollup task (``scheduling.tasks.roll_up_metrics``, beat entry ``metric-rollups``) also
writes the pool's business series every ``METRICS_ROLLUP_SECONDS``.

Series keys: a GPU's UUID, a MIG instance's UUID, ``pool``, ``tier:<purpose>``, or a group's
``model:<model>``, ``node:<hostname>``, ``rack:<rack>`` (``metric_groups``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection
from django.db.models import Avg, Count, DateTimeField, F, Max, Min, Q, QuerySet, Sum
from django.db.models.expressions import RawSQL
from django.utils import timezone
from django.utils.translation import gettext as _

from nodeagent.protocol import GpuMetrics

from ..choices import Purpose, SessionState, SliceKind
from ..models import (
    Gpu,
    MetricRollup,
    MetricSample,
    MetricSource,
    Node,
    Session,
    Slice,
    UsageRecord,
)
from ..models.metrics import AGGREGATES, FIVE_MINUTES, HOURLY, METRICS, RAW
from . import ServiceError
from .metric_groups import group_rows, tier_stats

POOL_KEY = "pool"
INTERRUPTED = {
    "lost": {SessionState.LOST},
    "failed": {SessionState.FAILED},
    "preempted": {SessionState.PREEMPTING, SessionState.PREEMPTED},
}


def tier_key(purpose: str) -> str:
    return f"tier:{purpose}"


# -- writing -------------------------------------------------------------------------------


def sources(wanted: dict[str, dict[str, Any]]) -> dict[str, int]:
    """Source ids by key, creating the missing ones (``wanted``: key -> kind, node, gpu)."""
    found = dict(MetricSource.objects.filter(key__in=wanted).values_list("key", "id"))
    missing = [
        MetricSource(key=key, **fields) for key, fields in wanted.items() if key not in found
    ]
    if missing:
        MetricSource.objects.bulk_create(missing, ignore_conflicts=True)
        found = dict(MetricSource.objects.filter(key__in=wanted).values_list("key", "id"))
    return found


def _gpu_values(reading: GpuMetrics) -> dict[str, float | None]:
    xids = reading.xid_errors
    return {
        "utilization_pct": reading.utilization_pct,
        "memory_used_mb": reading.memory_used_mb,
        "temperature_c": reading.temperature_c,
        "power_w": reading.power_w,
        "fan_pct": reading.fan_pct,
        "pcie_tx_kbps": reading.pcie_tx_kbps,
        "pcie_rx_kbps": reading.pcie_rx_kbps,
        "ecc_corrected": reading.ecc_corrected_volatile,
        "ecc_uncorrected": reading.ecc_uncorrected_volatile,
        "xid_errors": None if xids is None else len(xids),
    }


def record_heartbeat_metrics(node: Node, readings: Sequence[GpuMetrics], now: datetime) -> int:
    """One sample per GPU and per reported slice of a heartbeat; returns how many. Only this
    node's GPUs and MIG instances (as registered) are kept: a node cannot write another's
    series, nor make new ones with made-up UUIDs."""
    known = set(Gpu.objects.filter(node=node).values_list("uuid", flat=True))
    known |= set(
        Slice.objects.filter(gpu__node=node, kind=SliceKind.MIG).values_list(
            "device_uuid", flat=True
        )
    )
    wanted, values = heartbeat_rows(node, readings)
    wanted = {key: fields for key, fields in wanted.items() if key in known}
    if not wanted:
        return 0
    ids = sources(wanted)
    return write_samples({ids[key]: values[key] for key in wanted}, now)


def heartbeat_rows(
    node: Node, readings: Sequence[GpuMetrics]
) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, float | None]]]:
    """The sources a heartbeat's readings belong to (key -> kind, node, gpu) and each one's
    sample columns (key -> metric -> value)."""
    wanted: dict[str, dict[str, Any]] = {}
    values: dict[str, dict[str, float | None]] = {}
    for reading in readings:
        wanted[reading.uuid] = {"kind": MetricSource.Kind.GPU, "node": node}
        values[reading.uuid] = _gpu_values(reading)
        for part in reading.slices or []:
            wanted[part.uuid] = {"kind": MetricSource.Kind.SLICE, "node": node}
            wanted[part.uuid]["gpu_uuid"] = reading.uuid
            values[part.uuid] = {
                "memory_used_mb": part.memory_used_mb,
                "utilization_pct": part.utilization_pct,
            }
    return wanted, values


def write_samples(rows: dict[int, dict[str, float | None]], at: datetime) -> int:
    """Samples at one time, by source id (a second sample at the same instant is dropped)."""
    samples = [MetricSample(source_id=source, time=at, **row) for source, row in rows.items()]
    MetricSample.objects.bulk_create(samples, ignore_conflicts=True)
    return len(samples)


def record_pool_metrics(now: datetime) -> int:
    """The pool's business series since the previous pool sample (or one rollup period):
    by tier, the requests waiting now and the mean and p95 of submit to placement of the
    requests placed; time to desktop (submit to RUNNING) and the desktops started; of the
    runs that ended: how many, the part that completed, and the abnormal interruptions
    (lost, failed, preempted). Then the groups' series (the pool's, each GPU model's, node's
    and rack's utilisation, memory, power and temperature: ``metric_groups``)."""
    keys = {POOL_KEY: {"kind": MetricSource.Kind.POOL}}
    keys |= {tier_key(p.value): {"kind": MetricSource.Kind.POOL} for p in Purpose}
    ids = sources(keys)
    last = MetricSample.objects.filter(source_id=ids[POOL_KEY]).aggregate(t=Max("time"))["t"]
    since = last or now - timedelta(seconds=settings.METRICS_ROLLUP_SECONDS)
    if since >= now:
        return 0
    rows: dict[int, dict[str, float | None]] = {}
    for tier, stats in tier_stats(since, now).items():
        rows[ids[tier_key(tier)]] = {
            "queue_length": stats.waiting,
            "queue_wait_s": stats.wait_mean_s,
            "queue_wait_p95_s": stats.wait_p95_s,
        }
    started = Session.objects.filter(started_at__gte=since, started_at__lt=now).aggregate(
        wait=Avg(F("started_at") - F("created_at")), n=Count("pk")
    )
    ends = dict(
        UsageRecord.objects.filter(ended_at__gte=since, ended_at__lt=now)
        .order_by()
        .values_list("end_state")
        .annotate(n=Count("pk"))
    )
    ended = sum(ends.values())
    wait = started["wait"]
    pool: dict[str, float | None] = {
        "time_to_desktop_s": wait.total_seconds() if wait is not None else None,
        "started": started["n"],
        "runs_ended": ended,
    }
    for name, states in INTERRUPTED.items():
        pool[name] = sum(n for state, n in ends.items() if state in states)
    interrupted = sum(pool[name] or 0 for name in INTERRUPTED)
    pool["completion_ratio"] = (ended - interrupted) / ended if ended else None
    wanted, values = group_rows(since, now, POOL_KEY)
    group_ids = sources(wanted) if wanted else {}
    for key, group in values.items():
        if key == POOL_KEY:
            pool |= group
        else:
            rows[group_ids[key]] = group
    rows[ids[POOL_KEY]] = pool
    return write_samples(rows, now)


# -- rolling up and pruning ----------------------------------------------------------------


def _floor(moment: datetime, seconds: int) -> datetime:
    epoch = int(moment.timestamp())
    return datetime.fromtimestamp(epoch - epoch % seconds, tz=moment.tzinfo)


def _bucket_sql(column: str, seconds: int) -> RawSQL:
    """The start of the ``seconds``-long bucket a time falls in, in the database's own SQL
    (PostgreSQL, or SQLite for the embedded default)."""
    if connection.vendor == "sqlite":
        sql = f"datetime((CAST(strftime('%%s', {column}) AS INTEGER) / %s) * %s, 'unixepoch')"
    else:
        sql = f"to_timestamp(floor(extract(epoch from {column}) / %s) * %s)"
    return RawSQL(sql, (seconds, seconds), output_field=DateTimeField())


def roll_up(resolution: int, now: datetime) -> int:
    """Roll the complete buckets not rolled yet (5-minute from samples, hourly from 5-minute
    rollups); returns how many rollup rows were written. Idempotent."""
    finer = FIVE_MINUTES if resolution == HOURLY else RAW
    done = MetricRollup.objects.filter(resolution=resolution).aggregate(b=Max("bucket"))["b"]
    source: QuerySet[Any]
    if finer == RAW:
        source = MetricSample.objects.all()
        column, time_field = '"scheduling_metricsample"."time"', "time"
    else:
        source = MetricRollup.objects.filter(resolution=finer)
        column, time_field = '"scheduling_metricrollup"."bucket"', "bucket"
    if done is not None:
        start = done + timedelta(seconds=resolution)
    else:
        first = source.aggregate(t=Min(time_field))["t"]
        if first is None:
            return 0
        start = _floor(first, resolution)
    end = _floor(now, resolution)
    if start >= end:
        return 0
    aggregates: dict[str, Any] = {}
    if finer == RAW:
        aggregates["n"] = Count("*")
        for name in METRICS:
            aggregates |= {f"{name}_min": Min(name), f"{name}_max": Max(name)}
            aggregates[f"{name}_avg"] = Avg(name)
    else:
        aggregates["n"] = Sum("count")
        for name in METRICS:
            aggregates[f"{name}_min"] = Min(f"{name}_min")
            aggregates[f"{name}_max"] = Max(f"{name}_max")
            aggregates[f"{name}_sum"] = Sum(F(f"{name}_avg") * F("count"))
            aggregates[f"{name}_n"] = Sum("count", filter=Q(**{f"{name}_avg__isnull": False}))
    rows = (
        source.filter(**{f"{time_field}__gte": start, f"{time_field}__lt": end})
        .order_by()
        .annotate(b=_bucket_sql(column, resolution))
        .values("source_id", "b")
        .annotate(**aggregates)
    )
    rollups = [_rollup(dict(row), resolution, weighted=finer != RAW) for row in rows]
    MetricRollup.objects.bulk_create(rollups, ignore_conflicts=True, batch_size=2000)
    return len(rollups)


def _rollup(row: dict[str, Any], resolution: int, *, weighted: bool) -> MetricRollup:
    fields: dict[str, Any] = {}
    for name in METRICS:
        fields[f"{name}_min"] = row[f"{name}_min"]
        fields[f"{name}_max"] = row[f"{name}_max"]
        if weighted:
            n = row[f"{name}_n"]
            fields[f"{name}_avg"] = row[f"{name}_sum"] / n if n else None
        else:
            fields[f"{name}_avg"] = row[f"{name}_avg"]
    return MetricRollup(
        source_id=row["source_id"], resolution=resolution, bucket=row["b"], count=row["n"], **fields
    )


@dataclass(frozen=True)
class Windows:
    raw: timedelta
    five_minutes: timedelta
    hourly: timedelta


def windows() -> Windows:
    return Windows(
        raw=timedelta(hours=settings.METRICS_RAW_HOURS),
        five_minutes=timedelta(days=settings.METRICS_5MIN_DAYS),
        hourly=timedelta(days=settings.METRICS_HOURLY_DAYS),
    )


def prune(now: datetime) -> int:
    """Delete what is past each resolution's window, never what is not rolled up yet."""
    keep = windows()
    deleted = 0
    rolled = MetricRollup.objects.filter(resolution=FIVE_MINUTES).aggregate(b=Max("bucket"))["b"]
    cutoff = now - keep.raw
    if rolled is not None:
        cutoff = min(cutoff, rolled + timedelta(seconds=FIVE_MINUTES))
        deleted += MetricSample.objects.filter(time__lt=cutoff).delete()[0]
    hourly = MetricRollup.objects.filter(resolution=HOURLY).aggregate(b=Max("bucket"))["b"]
    cutoff = now - keep.five_minutes
    if hourly is not None:
        cutoff = min(cutoff, hourly + timedelta(seconds=HOURLY))
        deleted += MetricRollup.objects.filter(resolution=FIVE_MINUTES, bucket__lt=cutoff).delete()[
            0
        ]
    deleted += MetricRollup.objects.filter(
        resolution=HOURLY, bucket__lt=now - keep.hourly
    ).delete()[0]
    return deleted


@dataclass(frozen=True)
class RollupResult:
    pool_samples: int
    five_minute_rows: int
    hourly_rows: int
    pruned: int


def do_metric_rollups(now: datetime | None = None) -> RollupResult:
    """The rollup task's work: the pool's business sample, both rollups, then pruning."""
    now = now or timezone.now()
    pool = record_pool_metrics(now)
    five = roll_up(FIVE_MINUTES, now)
    hourly = roll_up(HOURLY, now)
    return RollupResult(pool, five, hourly, prune(now))


# -- reading -------------------------------------------------------------------------------


def resolution_for(start: datetime, now: datetime) -> int:
    """The finest resolution still kept for all of [start, now]: 0 (raw), 300 or 3600."""
    keep = windows()
    if start >= now - keep.raw:
        return RAW
    if start >= now - keep.five_minutes:
        return FIVE_MINUTES
    return HOURLY


def check_series(metric: str, aggregate: str) -> None:
    if metric not in METRICS:
        raise ServiceError(
            _("Unknown metric %(metric)s; use one of: %(known)s.")
            % {"metric": metric, "known": ", ".join(METRICS)},
            field="metric",
        )
    if aggregate not in AGGREGATES:
        raise ServiceError(_("The aggregate must be min, max or avg."), field="aggregate")


def metric_series(
    key: str,
    metric: str,
    start: datetime,
    end: datetime,
    *,
    aggregate: str = "avg",
    now: datetime | None = None,
) -> list[tuple[datetime, float]]:
    """The series ``metric`` of ``key`` (a GPU or MIG UUID, ``pool``, ``tier:<purpose>``) in
    [start, end), at the finest resolution kept for ``start``: raw samples, or the buckets'
    ``aggregate`` (avg by default) with each bucket's start as its time."""
    check_series(metric, aggregate)
    resolution = resolution_for(start, now or timezone.now())
    if resolution == RAW:
        points: Iterable[tuple[datetime, float | None]] = (
            MetricSample.objects.filter(source__key=key, time__gte=start, time__lt=end)
            .exclude(**{f"{metric}__isnull": True})
            .order_by("time")
            .values_list("time", metric)
        )
    else:
        column = f"{metric}_{aggregate}"
        points = (
            MetricRollup.objects.filter(
                source__key=key, resolution=resolution, bucket__gte=_floor(start, resolution)
            )
            .filter(bucket__lt=end)
            .exclude(**{f"{column}__isnull": True})
            .order_by("bucket")
            .values_list("bucket", column)
        )
    return [(at, float(value)) for at, value in points if value is not None]


__all__ = [
    "POOL_KEY",
    "RollupResult",
    "do_metric_rollups",
    "heartbeat_rows",
    "metric_series",
    "prune",
    "record_heartbeat_metrics",
    "record_pool_metrics",
    "resolution_for",
    "roll_up",
    "sources",
    "tier_key",
    "write_samples",
]
