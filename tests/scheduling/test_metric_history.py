"""Metric history (docs/monitoring.md): heartbeats store samples, rollups, pruning, series."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection

from portal.celery import app
from scheduling.models import MetricRollup, MetricSample, MetricSource, Session, UsageRecord
from scheduling.services import ServiceError
from scheduling.services.metric_history import (
    do_metric_rollups,
    metric_series,
    prune,
    record_pool_metrics,
    roll_up,
    tier_key,
    write_samples,
)
from scheduling.services.nodes import do_heartbeat
from scheduling.tasks import roll_up_metrics

pytestmark = pytest.mark.django_db

NOON = datetime(2026, 11, 2, 12, 0, tzinfo=UTC)


def _source(key: str = "GPU-x") -> int:
    return MetricSource.objects.create(key=key, kind=MetricSource.Kind.GPU).pk


def _at(minutes: float, seconds: float = 0) -> datetime:
    return NOON + timedelta(minutes=minutes, seconds=seconds)


def _rollup(source: int, resolution: int, bucket: datetime, **values: float) -> None:
    fields = {}
    for name, value in values.items():
        fields |= {f"{name}_min": value, f"{name}_max": value, f"{name}_avg": value}
    MetricRollup.objects.create(
        source_id=source, resolution=resolution, bucket=bucket, count=1, **fields
    )


def test_a_heartbeat_stores_one_sample_per_gpu_and_per_mig_instance(pool):
    gpu = {
        "uuid": "GPU-a", "utilization_pct": 55.0, "memory_used_mb": 4096,
        "temperature_c": 61.5, "power_w": 210.0, "fan_pct": None, "xid_errors": [13, 31],
        "ecc_corrected_volatile": 2,
        "slices": [{"uuid": "MIG-GPU-a-0", "memory_used_mb": 2000, "utilization_pct": None}],
    }  # fmt: skip
    old_agent = {"uuid": "GPU-c", "utilization_pct": 5.0, "memory_used_mb": 100,
                 "temperature_c": 40.0, "power_w": 30.0}  # fmt: skip
    stranger = {"uuid": "GPU-not-registered", "utilization_pct": 1.0, "memory_used_mb": 1,
                "temperature_c": 1.0, "power_w": 1.0}  # fmt: skip
    do_heartbeat(pool, {"gpus": [gpu, old_agent, stranger], "running_sessions": []})
    rows = {s.source.key: s for s in MetricSample.objects.select_related("source")}
    assert set(rows) == {"GPU-a", "MIG-GPU-a-0", "GPU-c"}  # not a GPU the node did not register
    a = rows["GPU-a"]
    assert (a.utilization_pct, a.memory_used_mb, a.temperature_c) == (55.0, 4096, 61.5)
    assert (a.fan_pct, a.xid_errors, a.ecc_corrected, a.ecc_uncorrected) == (None, 2, 2, None)
    mig = rows["MIG-GPU-a-0"]
    assert (mig.memory_used_mb, mig.utilization_pct, mig.temperature_c) == (2000, None, None)
    assert mig.source.kind == "slice" and mig.source.gpu_uuid == "GPU-a"
    assert mig.source.node_id == pool.pk
    assert rows["GPU-c"].pcie_tx_kbps is None  # an older agent: the field left out
    do_heartbeat(pool, {"gpus": [old_agent], "running_sessions": []})
    assert MetricSample.objects.filter(source__key="GPU-c").count() == 2
    assert MetricSource.objects.count() == 3  # sources are made once


def test_five_minute_rollups_split_at_the_bucket_boundary_and_wait_for_it_to_close():
    src = _source()
    for at, temperature in [
        (_at(0, 10), 40.0),
        (_at(3), 50.0),
        (_at(4, 59), 60.0),  # last of the 12:00 bucket
        (_at(5), 70.0),  # first of the 12:05 bucket
        (_at(9), 90.0),
        (_at(10, 1), 99.0),  # 12:10: not closed yet
    ]:
        write_samples({src: {"temperature_c": temperature, "power_w": 100.0}}, at)
    assert roll_up(300, now=_at(12)) == 2
    first, second = MetricRollup.objects.filter(resolution=300).order_by("bucket")
    assert (first.bucket, first.count) == (_at(0), 3)
    assert (first.temperature_c_min, first.temperature_c_max, first.temperature_c_avg) == (
        40.0, 60.0, 50.0,
    )  # fmt: skip
    assert (second.bucket, second.count) == (_at(5), 2)
    assert (second.temperature_c_min, second.temperature_c_max) == (70.0, 90.0)
    assert second.temperature_c_avg == 80.0 and second.utilization_pct_avg is None
    assert roll_up(300, now=_at(14, 59)) == 0  # idempotent: nothing new closed
    assert roll_up(300, now=_at(15)) == 1  # 12:10 closes
    assert MetricRollup.objects.get(bucket=_at(10)).temperature_c_max == 99.0


def test_hourly_rollups_weigh_each_five_minutes_by_its_samples():
    src = _source()
    for at, value in [(_at(50), 10.0), (_at(51), 10.0), (_at(52), 10.0), (_at(56), 50.0)]:
        write_samples({src: {"utilization_pct": value}}, at)
    write_samples({src: {"utilization_pct": 70.0}}, _at(61))  # 13:01, the next hour
    roll_up(300, now=_at(125))
    assert roll_up(3600, now=_at(125)) == 2
    noon, one = MetricRollup.objects.filter(resolution=3600).order_by("bucket")
    assert (noon.bucket, noon.count) == (NOON, 4)
    assert noon.utilization_pct_avg == 20.0  # (3 × 10 + 1 × 50) / 4, not (10 + 50) / 2
    assert (noon.utilization_pct_min, noon.utilization_pct_max) == (10.0, 50.0)
    assert (one.bucket, one.utilization_pct_avg) == (_at(60), 70.0)


def test_pruning_keeps_each_resolution_for_its_window(settings):
    settings.METRICS_RAW_HOURS = 48
    settings.METRICS_5MIN_DAYS = 30
    settings.METRICS_HOURLY_DAYS = 396
    now = NOON
    src = _source()
    write_samples({src: {"power_w": 1.0}}, now - timedelta(hours=49))
    write_samples({src: {"power_w": 2.0}}, now - timedelta(hours=47))
    _rollup(src, 300, now - timedelta(days=31), power_w=1.0)
    _rollup(src, 300, now - timedelta(days=29), power_w=2.0)
    _rollup(src, 300, now - timedelta(minutes=10), power_w=2.0)
    _rollup(src, 3600, now - timedelta(days=397), power_w=1.0)
    _rollup(src, 3600, now - timedelta(days=395), power_w=2.0)
    _rollup(src, 3600, now - timedelta(hours=2), power_w=2.0)
    assert prune(now) == 3
    assert list(MetricSample.objects.values_list("power_w", flat=True)) == [2.0]
    for resolution in (300, 3600):
        kept = MetricRollup.objects.filter(resolution=resolution)
        assert set(kept.values_list("power_w_avg", flat=True)) == {2.0}
        assert kept.count() == 2


def test_pruning_never_drops_samples_that_are_not_rolled_up(settings):
    settings.METRICS_RAW_HOURS = 1
    src = _source()
    write_samples({src: {"power_w": 1.0}}, NOON - timedelta(hours=3))
    assert prune(NOON) == 0  # no rollup yet: nothing is lost
    do_metric_rollups(NOON)
    assert MetricSample.objects.filter(source_id=src).count() == 0
    assert MetricRollup.objects.filter(source_id=src, resolution=300).count() == 1


def test_metric_series_picks_the_finest_resolution_kept_for_the_range(settings):
    settings.METRICS_RAW_HOURS = 48
    settings.METRICS_5MIN_DAYS = 30
    now = NOON
    src = _source()
    write_samples({src: {"temperature_c": 42.0}}, now - timedelta(hours=1))
    _rollup(src, 300, now - timedelta(days=3), temperature_c=55.0)
    _rollup(src, 3600, now - timedelta(days=60), temperature_c=66.0)
    raw = metric_series("GPU-x", "temperature_c", now - timedelta(hours=2), now, now=now)
    assert raw == [(now - timedelta(hours=1), 42.0)]
    five = metric_series("GPU-x", "temperature_c", now - timedelta(days=4), now, now=now)
    assert five == [(now - timedelta(days=3), 55.0)]
    hourly = metric_series("GPU-x", "temperature_c", now - timedelta(days=90), now, now=now)
    assert hourly == [(now - timedelta(days=60), 66.0)]
    assert metric_series("GPU-x", "power_w", now - timedelta(hours=2), now, now=now) == []
    with pytest.raises(ServiceError) as error:
        metric_series("GPU-x", "bogus", now - timedelta(hours=2), now, now=now)
    assert error.value.field == "metric"


def test_business_series_are_pool_level_samples(owner, profile):
    now = NOON
    Session.objects.create(
        user=owner, profile=profile, purpose="hobby", state="RUNNING",
        created_at=now - timedelta(minutes=10), placed_at=now - timedelta(minutes=4),
        started_at=now - timedelta(minutes=3),
    )  # fmt: skip
    for end_state in ("ENDED", "LOST", "FAILED", "PREEMPTING"):
        UsageRecord.objects.create(
            username="ada", purpose="hobby", profile_slug="painting",
            started_at=now - timedelta(hours=1), ended_at=now - timedelta(minutes=1),
            end_state=end_state,
        )  # fmt: skip
    assert record_pool_metrics(now) == 4  # the pool and the three tiers (their queue length)
    pool = MetricSample.objects.get(source__key="pool")
    assert pool.time_to_desktop_s == 420.0
    assert (pool.runs_ended, pool.lost, pool.failed, pool.preempted) == (4, 1, 1, 1)
    assert pool.completion_ratio == 0.25
    hobby = MetricSample.objects.get(source__key=tier_key("hobby"))
    assert hobby.queue_wait_s == 360.0
    later = now + timedelta(minutes=5)
    assert record_pool_metrics(later) == 4  # the window starts at the previous sample
    assert MetricSample.objects.filter(source__key="pool", time=later).get().runs_ended == 0
    series = metric_series("pool", "completion_ratio", now - timedelta(hours=1), later, now=later)
    assert series == [(now, 0.25)]


def test_the_task_runs_under_a_named_beat_entry():
    app.finalize()
    entry = app.conf.beat_schedule["metric-rollups"]
    assert entry["task"] == roll_up_metrics.name == "scheduling.tasks.roll_up_metrics"
    assert entry["options"]["expires"] == entry["schedule"] == 300.0
    src = _source()
    write_samples({src: {"power_w": 1.0}}, datetime.now(UTC) - timedelta(hours=1))
    assert roll_up_metrics() >= 1


@pytest.mark.skipif(connection.vendor == "sqlite", reason="this is the SQLite run itself")
def test_the_rollups_also_run_on_the_embedded_sqlite_default(tmp_path):
    """``make demo`` without a DATABASE_URL runs on SQLite: the bucket SQL has a SQLite
    form. This runs the rollup and series tests above against a SQLite database."""
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{tmp_path / 'embedded.sqlite3'}"}
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            __file__,
            "-k",
            "rollups or pruning or series",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert " passed" in run.stdout and "failed" not in run.stdout
