"""Metric history as the console shows it (``/console/history/``, docs/metrics.md): the series
of one group (the pool, a GPU model, a node or a rack) over 1 hour, 1 day, 7 days or
30 days, read from the samples and rollups of the group's sources (``metric_groups``) in one
query, and the same numbers as CSV.

Ranges and resolutions: 1 h from the samples (one every rollup period, 5 minutes), 1 day
from the 5-minute rollups, 7 and 30 days from the hourly ones; coarser where the finer one is
no longer kept (``resolution_for``). Counts (desktops started, ended…) are per interval: a
rollup's mean times its sample count.
"""

from __future__ import annotations

import io
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import connection
from django.db.models import QuerySet
from django.db.models.expressions import RawSQL
from django.utils import timezone
from django.utils.functional import Promise
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, pgettext_lazy

from ..choices import Purpose
from ..csv_export import SafeWriter
from ..models import MetricRollup, MetricSample, MetricSource
from ..models.metrics import FIVE_MINUTES, HOURLY, RAW
from . import ServiceError
from .metric_groups import GROUP_PREFIXES, group_key
from .metric_history import POOL_KEY, resolution_for, tier_key

RANGES: dict[str, tuple[timedelta, int, Promise]] = {
    "1h": (timedelta(hours=1), RAW, gettext_lazy("1 hour")),
    "1d": (timedelta(days=1), FIVE_MINUTES, gettext_lazy("1 day")),
    "7d": (timedelta(days=7), HOURLY, gettext_lazy("7 days")),
    "30d": (timedelta(days=30), HOURLY, gettext_lazy("30 days")),
}
SCOPES: dict[str, Promise] = {
    "pool": gettext_lazy("The pool"),
    "model": gettext_lazy("GPU model"),
    "node": gettext_lazy("Node"),
    "rack": gettext_lazy("Rack"),
}
# How a line reads its metric: the bucket's mean, its highest value, or its total (a count
# per interval: mean × samples).
MEAN, PEAK, TOTAL = "avg", "max", "total"


@dataclass(frozen=True)
class LineSpec:
    name: str
    label: Promise | str
    source: str  # the key's suffix: "" for the group itself, or a tier's key
    metric: str
    how: str = MEAN
    scale: float = 1.0
    minus: tuple[str, ...] = ()  # metrics subtracted (completed = ended − interruptions)
    rollups_only: bool = False  # a bucket's highest value: from samples, the line itself


@dataclass(frozen=True)
class ChartSpec:
    name: str
    title: Promise
    unit: Promise
    lines: tuple[LineSpec, ...]


TIERS = tuple(Purpose)
PERCENT = pgettext_lazy("unit", "%")
GIB = pgettext_lazy("unit", "GiB")
WATTS = pgettext_lazy("unit", "W")
CELSIUS = pgettext_lazy("unit", "°C")
REQUESTS = pgettext_lazy("unit", "requests")
SECONDS = pgettext_lazy("unit", "s")
DESKTOPS = pgettext_lazy("unit", "desktops")
HIGHEST = gettext_lazy("Highest in the interval")
DEVICE_CHARTS = (
    ChartSpec("utilisation", gettext_lazy("GPU utilisation"), PERCENT, (
        LineSpec("mean", gettext_lazy("Mean of the GPUs"), "", "utilization_pct"),
        LineSpec("peak", HIGHEST, "", "utilization_pct", PEAK, rollups_only=True),
    )),
    ChartSpec("memory", gettext_lazy("GPU memory used"), GIB, (
        LineSpec("used", gettext_lazy("Used"), "", "memory_used_mb", scale=1 / 1024),
        LineSpec("peak", HIGHEST, "", "memory_used_mb", PEAK, scale=1 / 1024, rollups_only=True),
    )),
    ChartSpec("power", gettext_lazy("Power draw"), WATTS, (
        LineSpec("draw", gettext_lazy("Draw"), "", "power_w"),
        LineSpec("peak", HIGHEST, "", "power_w", PEAK, rollups_only=True),
        LineSpec("budget", gettext_lazy("Rack budget"), "", "power_budget_w"),
    )),
    ChartSpec("temperature", gettext_lazy("Temperature of the hottest GPU"), CELSIUS, (
        LineSpec("mean", gettext_lazy("Mean"), "", "temperature_c"),
        LineSpec("peak", HIGHEST, "", "temperature_c", PEAK, rollups_only=True),
    )),
)  # fmt: skip
POOL_CHARTS = (
    ChartSpec("queue", gettext_lazy("Queue length by tier"), REQUESTS, tuple(
        LineSpec(t.value, t.label, tier_key(t.value), "queue_length") for t in TIERS
    )),
    ChartSpec("wait", gettext_lazy("Queue wait, 95th percentile, by tier"), SECONDS, tuple(
        LineSpec(t.value, t.label, tier_key(t.value), "queue_wait_p95_s", PEAK) for t in TIERS
    )),
    ChartSpec("desktops", gettext_lazy("Desktops"), DESKTOPS, (
        LineSpec("started", pgettext_lazy("desktops", "Started"), "", "started", TOTAL),
        LineSpec("completed", gettext_lazy("Completed"), "", "runs_ended", TOTAL,
                 minus=("lost", "failed", "preempted")),
        LineSpec("preempted", gettext_lazy("Preempted"), "", "preempted", TOTAL),
        LineSpec("failed", gettext_lazy("Failed"), "", "failed", TOTAL),
        LineSpec("lost", gettext_lazy("Lost"), "", "lost", TOTAL),
    )),
)  # fmt: skip


@dataclass(frozen=True)
class Line:
    name: str
    label: str
    values: list[float | None]


@dataclass(frozen=True)
class Chart:
    name: str
    title: str
    unit: str
    lines: list[Line]

    @property
    def empty(self) -> bool:
        return all(v is None for line in self.lines for v in line.values)


@dataclass(frozen=True)
class History:
    scope: str
    key: str  # the group's name ("" for the pool)
    range: str
    start: datetime
    end: datetime
    resolution: int
    times: list[datetime]
    charts: list[Chart]

    @property
    def empty(self) -> bool:
        return not self.times

    @property
    def source_key(self) -> str:
        return POOL_KEY if self.scope == "pool" else group_key(self.scope, self.key)


def group_names() -> dict[str, list[str]]:
    """The groups that have a series, by scope (``model``, ``node``, ``rack``), sorted."""
    names: dict[str, list[str]] = {prefix: [] for prefix in GROUP_PREFIXES}
    for key in MetricSource.objects.filter(kind=MetricSource.Kind.GROUP).values_list(
        "key", flat=True
    ):
        prefix, _sep, name = key.partition(":")
        if prefix in names:
            names[prefix].append(name)
    return {prefix: sorted(found) for prefix, found in names.items()}


def check_history(scope: str, key: str, range_name: str) -> None:
    """Refuse an unknown scope or range, a group name with the pool, or none for a group."""
    if scope not in SCOPES:
        raise ServiceError(_("Choose the pool, a GPU model, a node or a rack."), field="scope")
    if range_name not in RANGES:
        raise ServiceError(_("Choose a range of 1 hour, 1 day, 7 days or 30 days."), field="range")
    if scope != "pool" and not key:
        raise ServiceError(_("Choose which one."), field="key")


def _column(spec: LineSpec, metric: str, resolution: int) -> str:
    if resolution == RAW:
        return metric
    return f"{metric}_{'max' if spec.how == PEAK else 'avg'}"


def _specs(scope: str, resolution: int) -> list[ChartSpec]:
    charts = list(DEVICE_CHARTS) + (list(POOL_CHARTS) if scope == "pool" else [])
    if resolution == RAW:  # one value per sample: its highest is itself
        charts = [
            ChartSpec(c.name, c.title, c.unit, tuple(s for s in c.lines if not s.rollups_only))
            for c in charts
        ]
    if scope != "rack":
        charts = [
            ChartSpec(c.name, c.title, c.unit, tuple(s for s in c.lines if s.name != "budget"))
            for c in charts
        ]
    return charts


def _epoch(table: str, column: str) -> RawSQL:
    """A time column as Unix seconds, in the database's own SQL: reading 2,000 numbers is much
    cheaper than parsing 2,000 timestamps."""
    if connection.vendor == "sqlite":
        return RawSQL(f'CAST(strftime(\'%%s\', "{table}"."{column}") AS REAL)', ())
    return RawSQL(f'extract(epoch from "{table}"."{column}")::float8', ())


def _rows(
    keys: dict[str, int], columns: list[str], resolution: int, start: datetime, end: datetime
) -> QuerySet[Any]:
    """(source id, Unix seconds[, count], columns…) of the sources' samples or rollups in
    [start, end), oldest first."""
    if resolution == RAW:
        return (
            MetricSample.objects.filter(source_id__in=keys.values(), time__gte=start, time__lt=end)
            .order_by("time")
            .annotate(at=_epoch(MetricSample._meta.db_table, "time"))
            .values_list("source_id", "at", *columns)
        )
    epoch = int(start.timestamp())
    first = datetime.fromtimestamp(epoch - epoch % resolution, tz=start.tzinfo)
    return (
        MetricRollup.objects.filter(
            source_id__in=keys.values(), resolution=resolution, bucket__gte=first, bucket__lt=end
        )
        .order_by("bucket")
        .annotate(at=_epoch(MetricRollup._meta.db_table, "bucket"))
        .values_list("source_id", "at", "count", *columns)
    )


def _values(
    spec: LineSpec,
    series: dict[float, tuple[Any, ...]],
    times: list[float],
    position: dict[str, int],
    resolution: int,
) -> list[float | None]:
    """One line's value at each time (None where its source has no row or no value)."""
    column = position[_column(spec, spec.metric, resolution)]
    minus = [position[_column(spec, other, resolution)] for other in spec.minus]
    count = position["count"] if spec.how == TOTAL and resolution != RAW else None
    values: list[float | None] = []
    for at in times:
        row = series.get(at)
        value = None if row is None else row[column]
        if value is None:
            values.append(None)
            continue
        for other in minus:
            value -= row[other] or 0.0  # type: ignore[index]
        if count is not None:
            value *= row[count]  # type: ignore[index]
        values.append(round(value * spec.scale, 2))
    return values


def metric_history(
    scope: str, key: str, range_name: str, *, now: datetime | None = None
) -> History:
    """The charts of one group over one range (``check_history`` first). Two queries: the
    group's sources, then their rows, by the samples' or rollups' primary key."""
    check_history(scope, key, range_name)
    now = now or timezone.now()
    span, finest, _label = RANGES[range_name]
    start = now - span
    resolution = max(finest, resolution_for(start, now))
    own = POOL_KEY if scope == "pool" else group_key(scope, key)
    specs = _specs(scope, resolution)
    wanted = {own} | {own if not s.source else s.source for c in specs for s in c.lines}
    keys = dict(MetricSource.objects.filter(key__in=wanted).values_list("key", "id"))
    if own not in keys:
        raise ServiceError(_("There is no history for %(key)s.") % {"key": key}, field="key")
    columns = sorted(
        {
            _column(s, metric, resolution)
            for c in specs
            for s in c.lines
            for metric in (s.metric, *s.minus)
        }
    )
    names = ["source_id", "time"] + (["count"] if resolution != RAW else []) + columns
    position = {name: index for index, name in enumerate(names)}
    by_source: dict[int, dict[float, tuple[Any, ...]]] = {pk: {} for pk in keys.values()}
    for row in _rows(keys, columns, resolution, start, now):
        by_source[row[0]][row[1]] = row
    ordered = sorted({at for series in by_source.values() for at in series})
    times = [datetime.fromtimestamp(at, tz=UTC) for at in ordered]
    charts = []
    for c in specs:
        lines = [
            Line(
                s.name,
                str(s.label),
                _values(s, by_source.get(keys.get(s.source or own, -1), {}), ordered, position,
                        resolution),
            )
            for s in c.lines
        ]  # fmt: skip
        if c.name == "power" and scope == "rack" and all(v is None for v in lines[-1].values):
            lines.pop()  # a rack without a stated budget
        charts.append(Chart(c.name, str(c.title), str(c.unit), lines))
    return History(scope, key, range_name, start, now, resolution, times, charts)


def history_csv(history: History) -> str:
    """The page's numbers as CSV: one row per time (ISO 8601 in the current time zone), one
    column per line of each chart; no cell a spreadsheet could read as a formula."""
    out = io.StringIO()
    writer = SafeWriter(out)
    header: list[object] = [_("Time"), str(SCOPES[history.scope])]
    header += [f"{c.title}: {line.label} ({c.unit})" for c in history.charts for line in c.lines]
    writer.writerow(header)
    name = history.key or str(SCOPES["pool"])
    for index, at in enumerate(history.times):
        cells: list[object] = [timezone.localtime(at).isoformat(), name]
        cells += [_cell(line.values[index]) for c in history.charts for line in c.lines]
        writer.writerow(cells)
    return out.getvalue()


def _cell(value: float | None) -> object:
    return "" if value is None else value


def table_rows(
    history: History, chart: Chart
) -> Iterable[tuple[datetime, tuple[float | None, ...]]]:
    """A chart's rows for its table: each time, with each line's value at it."""
    return zip(history.times, zip(*(line.values for line in chart.lines), strict=True), strict=True)


__all__ = [
    "RANGES",
    "SCOPES",
    "Chart",
    "History",
    "Line",
    "check_history",
    "group_names",
    "history_csv",
    "metric_history",
    "table_rows",
]
