"""``python -m bench.metric_storage``: the metric history one node takes per day.

Fills a database of its own (``<name>_bench_metric_storage``, dropped at the end) with the
samples of one node heartbeating every ``--interval`` seconds (default: the interval the
portal gives agents, ``DESKPOOL_AGENT_HEARTBEAT_INTERVAL_S``) for ``--days`` simulated days:
the demo fleet's ``gpu-a01``, 8 A100s in MIG mode with 4 instances each (40 series), its
readings from the SIMULATED probe with half the instances busy in turn. The samples are the
rows ``record_heartbeat_metrics`` writes, inserted in batches for speed, and the pool's
business series are written every rollup period as the beat task does. Then the rollup task
runs once. Prints, per resolution, the rows and bytes (PostgreSQL ``pg_total_relation_size``:
table, indexes and TOAST) per node per day, and the steady-state total for the windows in
the settings (48 h raw, 30 days of 5-minute, 13 months of hourly rollups by default).
Uses the database server of ``DATABASE_URL``; run it from the repository root.
"""

from __future__ import annotations

import argparse
import os
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
django.setup()

from django.conf import settings  # noqa: E402
from django.db import connection  # noqa: E402

from nodeagent.probe.simulated import SimulatedProbe, load_fleet  # noqa: E402
from scheduling.models import MetricRollup, MetricSample, MetricSource, Node  # noqa: E402
from scheduling.models.metrics import FIVE_MINUTES, HOURLY  # noqa: E402
from scheduling.services.metric_history import (  # noqa: E402
    do_metric_rollups,
    heartbeat_rows,
    record_pool_metrics,
    sources,
)

FLEET = Path(__file__).resolve().parent.parent / "nodeagent" / "fleets" / "demo.yaml"
NODE = "gpu-a01"
BATCH = 20_000  # sample rows per INSERT batch
START = datetime(2026, 1, 5, tzinfo=UTC)


def _size(model: type[MetricSample] | type[MetricRollup] | type[MetricSource]) -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_total_relation_size(%s)", [model._meta.db_table])
        return int(cursor.fetchone()[0])


def simulate(days: float, interval: float) -> int:
    """Write ``days`` of one node's heartbeats; returns how many sample rows."""
    node = Node.objects.create(hostname=NODE)
    probe = SimulatedProbe(load_fleet(FLEET).node(NODE), seed=1)
    devices = [m.uuid for gpu in probe.inventory() for m in gpu.mig_instances]
    beats = int(days * 86400 / interval)
    ids: dict[str, int] = {}
    batch: list[MetricSample] = []
    rows = 0
    next_pool = START + timedelta(seconds=settings.METRICS_ROLLUP_SECONDS)
    for beat in range(beats):
        at = START + timedelta(seconds=beat * interval)
        shift = (beat * len(devices)) // max(1, beats)  # the busy half moves over the day
        busy = [devices[(shift + i) % len(devices)] for i in range(0, len(devices), 2)]
        wanted, values = heartbeat_rows(node, probe.metrics(busy))
        if not ids:
            ids = sources(wanted)
        batch += [MetricSample(source_id=ids[k], time=at, **row) for k, row in values.items()]
        if len(batch) >= BATCH:
            MetricSample.objects.bulk_create(batch)
            rows, batch = rows + len(batch), []
        if at >= next_pool:
            record_pool_metrics(at)
            next_pool = at + timedelta(seconds=settings.METRICS_ROLLUP_SECONDS)
    MetricSample.objects.bulk_create(batch)
    return rows + len(batch)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--days", type=float, default=2.0)
    parser.add_argument("--interval", type=float, default=settings.AGENT_HEARTBEAT_INTERVAL_S)
    args = parser.parse_args()
    if connection.vendor != "postgresql":
        print("bench_metric_storage measures PostgreSQL: set DATABASE_URL", file=sys.stderr)
        return 2
    original = connection.settings_dict["NAME"]
    connection.settings_dict["TEST"]["NAME"] = f"{original}_bench_metric_storage"
    connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    try:
        report(args.days, args.interval)
    finally:
        connection.creation.destroy_test_db(original, verbosity=0)
    return 0


def report(days: float, interval: float) -> None:
    empty_samples, empty_rollups = _size(MetricSample), _size(MetricRollup)
    rows = simulate(days, interval)
    do_metric_rollups(START + timedelta(days=days))
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE scheduling_metricsample, scheduling_metricrollup")
    series = MetricSource.objects.count()
    raw_bytes = _size(MetricSample) - empty_samples
    rollup_bytes = _size(MetricRollup) - empty_rollups
    counts = {
        res: MetricRollup.objects.filter(resolution=res).count() for res in (FIVE_MINUTES, HOURLY)
    }
    per_rollup_row = rollup_bytes / max(1, sum(counts.values()))
    raw_day, raw_bytes_day = rows / days, raw_bytes / days
    windows = {
        "raw": settings.METRICS_RAW_HOURS / 24,
        "5-minute": settings.METRICS_5MIN_DAYS,
        "hourly": settings.METRICS_HOURLY_DAYS,
    }
    per_day = {
        "raw": (raw_day, raw_bytes_day),
        "5-minute": (counts[FIVE_MINUTES] / days, counts[FIVE_MINUTES] * per_rollup_row / days),
        "hourly": (counts[HOURLY] / days, counts[HOURLY] * per_rollup_row / days),
    }
    print(
        f"bench_metric_storage: node {NODE}, {series} series (8 GPUs, 32 MIG instances, "
        f"pool and tiers), a heartbeat every {interval:g} s for {days:g} days on PostgreSQL "
        f"{getattr(connection, 'pg_version', 0) // 10000}"
    )
    print(f"{'resolution':<10} {'rows/day':>10} {'bytes/day':>12} {'kept (days)':>12} "
          f"{'steady rows':>12} {'steady MB':>10}")  # fmt: skip
    total_rows = total_bytes = 0.0
    for name, (row_day, byte_day) in per_day.items():
        kept = windows[name]
        total_rows += row_day * kept
        total_bytes += byte_day * kept
        print(
            f"{name:<10} {row_day:>10.0f} {byte_day:>12.0f} {kept:>12g} "
            f"{row_day * kept:>12.0f} {byte_day * kept / 1e6:>10.1f}"
        )
    print(
        f"{'total':<10} {'':>10} {'':>12} {'':>12} {total_rows:>12.0f} {total_bytes / 1e6:>10.1f}"
    )
    print(
        f"bytes per row: raw {raw_bytes / max(1, rows):.1f}, rollup {per_rollup_row:.1f}; "
        f"one node, steady state for a term (13 months of history): {total_bytes / 1e6:.0f} MB"
    )


if __name__ == "__main__":
    sys.exit(main())
