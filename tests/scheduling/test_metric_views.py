"""The console's metric history (scheduling/services/metric_groups.py, metric_views.py): the
groups' series written at each rollup period, read back per scope and range from the right
resolution, an empty range, the CSV (no formula injection). On the real database."""

from __future__ import annotations

import csv
import io
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection

from scheduling.models import MetricRollup, MetricSample, MetricSource, Session, UsageRecord
from scheduling.models.metrics import FIVE_MINUTES, HOURLY, RAW
from scheduling.services import ServiceError
from scheduling.services.metric_history import (
    record_pool_metrics,
    sources,
    tier_key,
    write_samples,
)
from scheduling.services.metric_views import (
    group_names,
    history_csv,
    metric_history,
)

from ..conftest import gpu_inventory

pytestmark = pytest.mark.django_db

NOON = datetime(2026, 11, 2, 12, 0, tzinfo=UTC)
DEVICE = ("utilization_pct", "memory_used_mb", "power_w", "temperature_c")


def _gpu_samples(values: dict[str, dict[str, float]], at: datetime) -> None:
    ids = sources({key: {"kind": MetricSource.Kind.GPU} for key in values})
    write_samples({ids[key]: row for key, row in values.items()}, at)


@pytest.fixture
def racked(register_node):
    """Two nodes in rack r1 (budget 1000 W, stated on one of them), a third in rack r2:
    two A100s on n1, one T4 on n2, one T4 on n3."""
    n1, _ = register_node(
        "n1", [gpu_inventory("GPU-1", 0, mig_slices=2), gpu_inventory("GPU-2", 1, mig_slices=2)]
    )
    n2, _ = register_node("n2", [gpu_inventory("GPU-3", 0, shares=2)])
    n3, _ = register_node("n3", [gpu_inventory("GPU-4", 0, shares=2)])
    n1.labels = {"rack": "r1", "rack_power_budget_w": "1000"}
    n3.labels = {"rack": "r2"}
    for node in (n1, n3):
        node.save(update_fields=["labels"])
    return n1, n2, n3


# fmt: skip


def test_each_rollup_period_writes_the_groups_and_the_tiers(racked, owner, profile):
    since = NOON - timedelta(minutes=5)
    record_pool_metrics(since)  # the previous pool sample: the period starts there
    for minute, scale in ((1, 1.0), (3, 3.0)):
        readings = {  # utilisation, memory, power, temperature
            "GPU-1": (10 * scale, 1024, 100, 50),
            "GPU-2": (30 * scale, 2048, 200, 70),
            "GPU-3": (50.0, 512, 60, 40),
            "GPU-4": (90.0, None, 70, 80),
        }
        _gpu_samples(
            {uuid: dict(zip(DEVICE, values, strict=True)) for uuid, values in readings.items()},
            since + timedelta(minutes=minute),
        )
    _gpu_samples({"GPU-1": {"utilization_pct": 99.0}}, NOON)  # the next period's
    waits = (10, 20, 30, 40, 50, 60, 70, 80, 90, 600)  # seconds, thesis
    for wait in waits:
        placed = since + timedelta(minutes=2)
        Session.objects.create(
            user=owner, profile=profile, purpose="thesis", state="RUNNING",
            created_at=placed - timedelta(seconds=wait), placed_at=placed, started_at=placed,
        )  # fmt: skip
    for _ in range(3):
        Session.objects.create(user=owner, profile=profile, purpose="hobby", state="QUEUED")
    UsageRecord.objects.create(
        username="ada", purpose="hobby", profile_slug="painting", end_state="FAILED",
        started_at=since - timedelta(hours=1), ended_at=since + timedelta(minutes=1),
    )  # fmt: skip
    record_pool_metrics(NOON)
    at_noon = {
        s.source.key: s
        for s in MetricSample.objects.filter(time=NOON)
        .exclude(source__kind="gpu")
        .select_related("source")
    }
    assert set(at_noon) == {
        "pool", "tier:thesis", "tier:coursework", "tier:hobby",
        "model:NVIDIA A100-SXM4-80GB", "model:Tesla T4", "node:n1", "node:n2", "node:n3",
        "rack:r1", "rack:r2",
    }  # fmt: skip
    assert {at_noon[k].source.kind for k in at_noon if ":" in k and "tier" not in k} == {"group"}
    pool = at_noon["pool"]
    # utilisation: the mean of the GPUs' means (20, 60, 50, 90); memory and power: sums of
    # the GPUs' means; temperature: the hottest GPU's mean
    assert pool.utilization_pct == pytest.approx(55.0)
    assert (pool.memory_used_mb, pool.power_w, pool.temperature_c) == (3584.0, 430.0, 80.0)
    assert (pool.started, pool.failed, pool.runs_ended) == (10, 1, 1)
    node1 = at_noon["node:n1"]
    assert (node1.utilization_pct, node1.memory_used_mb, node1.power_w) == (40.0, 3072.0, 300.0)
    rack1, rack2 = at_noon["rack:r1"], at_noon["rack:r2"]
    assert (rack1.power_w, rack1.power_budget_w, rack1.temperature_c) == (360.0, 1000.0, 70.0)
    assert (rack2.power_w, rack2.power_budget_w) == (70.0, None)
    assert at_noon["model:Tesla T4"].utilization_pct == 70.0
    thesis, hobby = at_noon[tier_key("thesis")], at_noon[tier_key("hobby")]
    assert (thesis.queue_length, thesis.queue_wait_s, thesis.queue_wait_p95_s) == (0, 105.0, 600.0)
    assert (hobby.queue_length, hobby.queue_wait_p95_s) == (3, None)
    assert at_noon[tier_key("coursework")].queue_length == 0


def _rollup(key: str, resolution: int, bucket: datetime, count: int = 1, **values: float) -> None:
    source = sources({key: {"kind": MetricSource.Kind.GROUP}})[key]
    fields = {}
    for name, value in values.items():
        fields |= {f"{name}_min": value / 2, f"{name}_max": value * 2, f"{name}_avg": value}
    MetricRollup.objects.create(
        source_id=source, resolution=resolution, bucket=bucket, count=count, **fields
    )


def _line(history, chart: str, line: str) -> list[float | None]:
    found = {c.name: c for c in history.charts}[chart]
    return {ln.name: ln.values for ln in found.lines}[line]


def test_each_range_reads_its_resolution(settings):
    key = "node:n1"
    now = NOON
    # a sample 30 minutes ago (1 h: the samples themselves)
    ids = sources({key: {"kind": MetricSource.Kind.GROUP}})
    write_samples({ids[key]: {"utilization_pct": 12.0}}, now - timedelta(minutes=30))
    _rollup(key, FIVE_MINUTES, now - timedelta(hours=3), utilization_pct=40.0)
    _rollup(key, HOURLY, now - timedelta(days=3), utilization_pct=70.0)
    _rollup(key, HOURLY, now - timedelta(days=20), utilization_pct=20.0)
    _rollup(key, HOURLY, now - timedelta(days=40), utilization_pct=99.0)  # out of every range
    hour = metric_history("node", "n1", "1h", now=now)
    assert (hour.resolution, hour.times) == (RAW, [now - timedelta(minutes=30)])
    assert _line(hour, "utilisation", "mean") == [12.0]
    assert "peak" not in {ln.name for ln in hour.charts[0].lines}  # a sample is its own peak
    day = metric_history("node", "n1", "1d", now=now)
    assert (day.resolution, day.times) == (FIVE_MINUTES, [now - timedelta(hours=3)])
    assert _line(day, "utilisation", "mean") == [40.0]
    assert _line(day, "utilisation", "peak") == [80.0]  # the bucket's max
    week = metric_history("node", "n1", "7d", now=now)
    assert (week.resolution, week.times) == (HOURLY, [now - timedelta(days=3)])
    month = metric_history("node", "n1", "30d", now=now)
    assert month.times == [now - timedelta(days=20), now - timedelta(days=3)]
    assert _line(month, "utilisation", "mean") == [20.0, 70.0]
    assert [c.name for c in month.charts] == ["utilisation", "memory", "power", "temperature"]
    # where the 5-minute rollups are no longer kept, a day reads the hourly ones
    settings.METRICS_RAW_HOURS, settings.METRICS_5MIN_DAYS = 6, 0.5
    assert metric_history("node", "n1", "1d", now=now).resolution == HOURLY


def test_the_pool_has_the_queue_and_desktops_and_counts_are_per_interval():
    bucket = NOON - timedelta(hours=2)
    ends = {"runs_ended": 1.5, "lost": 0.25, "failed": 0.25, "preempted": 0.5}
    _rollup("pool", HOURLY, bucket, count=12, started=2.0, power_w=500.0, **ends)
    _rollup(tier_key("thesis"), HOURLY, bucket, count=12, queue_length=4.0, queue_wait_p95_s=30.0)
    _rollup(tier_key("hobby"), HOURLY, bucket - timedelta(hours=1), count=12, queue_length=1.0)
    history = metric_history("pool", "", "7d", now=NOON)
    assert [c.name for c in history.charts] == [
        "utilisation", "memory", "power", "temperature", "queue", "wait", "desktops",
    ]  # fmt: skip
    assert history.times == [bucket - timedelta(hours=1), bucket]
    assert _line(history, "desktops", "started") == [None, 24.0]  # 2 a sample × 12 samples
    assert _line(history, "desktops", "completed") == [None, 6.0]  # (1.5 − 1) × 12
    assert _line(history, "desktops", "failed") == [None, 3.0]
    assert _line(history, "queue", "thesis") == [None, 4.0]
    assert _line(history, "queue", "hobby") == [1.0, None]
    assert _line(history, "wait", "thesis") == [None, 60.0]  # the highest p95 of the hour
    assert "budget" not in {ln.name for c in history.charts for ln in c.lines}  # racks only


def test_the_pools_hour_reads_its_samples_every_chart_included():
    ids = sources({key: {"kind": MetricSource.Kind.POOL} for key in ("pool", "tier:thesis")})
    at = NOON - timedelta(minutes=10)
    write_samples({ids["pool"]: {"utilization_pct": 30.0, "started": 2.0, "runs_ended": 1.0}}, at)
    write_samples({ids["tier:thesis"]: {"queue_length": 3.0, "queue_wait_p95_s": 42.0}}, at)
    hour = metric_history("pool", "", "1h", now=NOON)
    assert hour.resolution == RAW and hour.times == [at]
    assert all(chart.lines for chart in hour.charts)  # the wait's p95 is no "highest" line
    assert _line(hour, "wait", "thesis") == [42.0]
    assert _line(hour, "queue", "thesis") == [3.0]
    assert _line(hour, "desktops", "started") == [2.0]  # a sample's count, as it is
    assert _line(hour, "desktops", "completed") == [1.0]


def test_a_rack_shows_its_budget_and_an_empty_range_says_so():
    _rollup("rack:r1", HOURLY, NOON - timedelta(days=2), power_w=800.0, power_budget_w=1000.0)
    rack = metric_history("rack", "r1", "7d", now=NOON)
    assert _line(rack, "power", "budget") == [1000.0]
    empty = metric_history("rack", "r1", "1h", now=NOON)
    assert empty.empty and empty.times == [] and all(c.empty for c in empty.charts)
    assert group_names() == {"model": [], "node": [], "rack": ["r1"]}


@pytest.mark.parametrize(
    ("scope", "key", "range_name", "field"),
    [
        ("galaxy", "", "1d", "scope"),
        ("node", "", "1d", "key"),
        ("node", "nowhere", "1d", "key"),
        ("pool", "", "2y", "range"),
    ],
)
def test_bad_requests_are_refused_with_the_field(scope, key, range_name, field):
    with pytest.raises(ServiceError) as refused:
        metric_history(scope, key, range_name, now=NOON)
    assert refused.value.field == field


def test_the_csv_has_every_line_and_no_formula():
    key = "=HYPERLINK(1)"
    _rollup(f"rack:{key}", HOURLY, NOON - timedelta(hours=5), power_w=-3.5, temperature_c=60.0)
    history = metric_history("rack", key, "7d", now=NOON)
    rows = list(csv.reader(io.StringIO(history_csv(history))))
    header, first = rows[0], rows[1]
    assert header[:2] == ["Time", "Rack"]
    assert "Power draw: Draw (W)" in header and "Power draw: Rack budget (W)" not in header
    assert len(rows) == 2 and len(first) == len(header)
    assert first[0] == (NOON - timedelta(hours=5)).isoformat()
    assert first[1] == "'=HYPERLINK(1)"  # quoted: a spreadsheet shows it as text
    assert first[header.index("Power draw: Draw (W)")] == "-3.5"  # a number stays a number
    assert (
        first[header.index("Temperature of the hottest GPU: Highest in the interval (°C)")]
        == "120.0"
    )


@pytest.mark.skipif(connection.vendor == "sqlite", reason="this is the SQLite run itself")
def test_the_history_also_reads_on_the_embedded_sqlite_default(tmp_path):
    """``make demo`` without a DATABASE_URL runs on SQLite: the times are read as Unix seconds
    in SQLite's own SQL. This runs the reading tests above against a SQLite database."""
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{tmp_path / 'embedded.sqlite3'}"}
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__,
         "-k", "range or pool or rack or csv"],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert " passed" in run.stdout and "failed" not in run.stdout
