"""``python -m bench.metric_history``: how fast the console's metric history pages answer on a
pool of 1,000 GPUs with 30 days of history.

Builds a database of its own (``<name>_bench_metric_history``, dropped at the end) holding
``--nodes`` nodes of 8 GPUs (125: 1,000 GPUs) of four models in ``--racks`` racks (each with a
power budget), and the history the rollup task would have left after ``--days`` days (30),
as the retention windows keep it: for every GPU and every group (the pool, its tiers, each
model, node and rack) the 5-minute rollups of the whole period (``METRICS_5MIN_DAYS``, 30
days) and the hourly ones; the groups' raw samples of the last ``METRICS_RAW_HOURS`` (48 h),
one every rollup period. The rows are written by INSERT … SELECT over generate_series (the
GPUs' 5-minute rollups alone are 8.6 million rows); ``--no-gpu-rollups`` leaves the GPUs'
own rows out (the pages never read them).

Then every page (scope × range: the pool, one GPU model, one node, one rack; 1 h, 1 day,
7 days, 30 days) is fetched ``--repeat`` times through Django's test client as a signed-in
admin (the whole middleware stack, template rendering included), and the CSV of each
scope's 30 days once. Prints per page the median and 95th percentile in ms, the SQL queries,
and the size of the answer; and PostgreSQL's plan of the 30-day node query. Uses the
database server of ``DATABASE_URL``; run it from the repository root.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from datetime import timedelta

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
django.setup()

from django.conf import settings  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.db import connection  # noqa: E402
from django.test import Client  # noqa: E402
from django.test.utils import CaptureQueriesContext, setup_test_environment  # noqa: E402
from django.utils import timezone  # noqa: E402

from scheduling.choices import Purpose, SliceKind  # noqa: E402
from scheduling.models import Gpu, MetricSource, Node  # noqa: E402
from scheduling.models.metrics import FIVE_MINUTES, HOURLY, RAW  # noqa: E402
from scheduling.services.metric_groups import group_key  # noqa: E402
from scheduling.services.metric_history import POOL_KEY, tier_key  # noqa: E402

MODELS = ("NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3", "NVIDIA L40S", "Tesla T4")
RANGES = ("1h", "1d", "7d", "30d")
GROUP_METRICS = ("utilization_pct", "memory_used_mb", "power_w", "temperature_c")
TIER_METRICS = ("queue_length", "queue_wait_s", "queue_wait_p95_s")
POOL_COUNTS = ("started", "runs_ended", "lost", "failed", "preempted")


def build(nodes: int, racks: int) -> dict[str, list[int]]:
    """The nodes, GPUs and sources; returns the source ids by kind of series."""
    made = Node.objects.bulk_create(
        Node(
            hostname=f"gpu-{n:03d}",
            cpu_count=64,
            memory_mb=512 * 1024,
            labels={"rack": f"r{n % racks:02d}", "rack_power_budget_w": "24000"},
        )
        for n in range(nodes)
    )
    gpus = Gpu.objects.bulk_create(
        Gpu(
            node=node,
            uuid=f"GPU-{node.hostname}-{i}",
            index=i,
            model=MODELS[n % len(MODELS)],
            memory_mb=81920,
            sharing=SliceKind.WHOLE,
        )
        for n, node in enumerate(made)
        for i in range(8)
    )
    gpu_sources = MetricSource.objects.bulk_create(
        MetricSource(kind=MetricSource.Kind.GPU, key=g.uuid, node_id=g.node_id) for g in gpus
    )
    groups = [group_key("model", m) for m in MODELS]
    groups += [group_key("node", node.hostname) for node in made]
    groups += [group_key("rack", f"r{r:02d}") for r in range(racks)]
    group_sources = MetricSource.objects.bulk_create(
        MetricSource(kind=MetricSource.Kind.GROUP, key=key) for key in groups
    )
    pool = MetricSource.objects.create(kind=MetricSource.Kind.POOL, key=POOL_KEY)
    tiers = MetricSource.objects.bulk_create(
        MetricSource(kind=MetricSource.Kind.POOL, key=tier_key(p.value)) for p in Purpose
    )
    return {
        "gpu": [s.pk for s in gpu_sources],
        "group": [s.pk for s in group_sources if not s.key.startswith("rack:")],
        "rack": [s.pk for s in group_sources if s.key.startswith("rack:")],
        "tier": [s.pk for s in tiers],
        "pool": [pool.pk],
    }


def _fill(
    table: str, ids: list[int], metrics: tuple[str, ...], resolution: int, days: float
) -> int:
    """INSERT … SELECT one row per source and bucket (samples when ``resolution`` is RAW,
    one every rollup period) with made-up values that wave over the day."""
    step = settings.METRICS_ROLLUP_SECONDS if resolution == RAW else resolution
    end = timezone.now().replace(minute=0, second=0, microsecond=0)
    start = end - timedelta(days=days)
    wave = "(50 + 40 * sin(extract(epoch from t) / 13750.0 + s) + random() * 5)"
    if resolution == RAW:
        columns = ["source_id", "time", *metrics]
        values = [wave] * len(metrics)
        extra = ""
    else:
        columns = ["source_id", "resolution", "bucket", "count"]
        values = []
        for name in metrics:
            columns += [f"{name}_min", f"{name}_max", f"{name}_avg"]
            values += [f"{wave} * 0.8", f"{wave} * 1.2", wave]
        extra = f"{resolution}, "
    time_values = "t, " if resolution == RAW else f"{extra}t, {max(1, resolution // 300)}, "
    sql = (
        f"INSERT INTO {table} ({', '.join(columns)}) "
        f"SELECT s, {time_values}{', '.join(values)} "
        f"FROM unnest(%s::int[]) AS s, "
        f"generate_series(%s::timestamptz, %s::timestamptz, %s * interval '1 second') AS t"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [ids, start, end - timedelta(seconds=step), step])
        return cursor.rowcount


def fill(ids: dict[str, list[int]], days: float, gpu_rollups: bool) -> dict[str, int]:
    rollups, samples = "scheduling_metricrollup", "scheduling_metricsample"
    raw_days = min(days, settings.METRICS_RAW_HOURS / 24)
    five_days = min(days, settings.METRICS_5MIN_DAYS)
    written = {"samples": 0, "5-minute": 0, "hourly": 0}
    sets = [
        (ids["group"], GROUP_METRICS),
        (ids["rack"], (*GROUP_METRICS, "power_budget_w")),
        (ids["tier"], TIER_METRICS),
        (ids["pool"], (*GROUP_METRICS, *POOL_COUNTS)),
    ]
    if gpu_rollups:
        sets.append((ids["gpu"], GROUP_METRICS))
    for index, (group, metrics) in enumerate(sets):
        if index < 4:  # the groups' own samples (the GPUs' raw ones are not read by the pages)
            written["samples"] += _fill(samples, group, metrics, RAW, raw_days)
        written["5-minute"] += _fill(rollups, group, metrics, FIVE_MINUTES, five_days)
        written["hourly"] += _fill(rollups, group, metrics, HOURLY, days)
    return written


def time_pages(repeat: int) -> list[tuple[str, str, float, float, int, int]]:
    admin = get_user_model().objects.create_user("bench-admin", is_staff=True, is_superuser=True)
    client = Client()
    client.force_login(admin)
    pages = {
        "pool": "pool",
        "model": f"model:{MODELS[0]}",
        "node": "node:gpu-000",
        "rack": "rack:r00",
    }
    results = []
    for scope, of in pages.items():
        for name in RANGES:
            query = {"of": of, "range": name}
            response = client.get("/console/history/", query)
            assert response.status_code == 200, (scope, name, response.status_code)
            times = []
            for _ in range(repeat):
                started = time.perf_counter()
                client.get("/console/history/", query)
                times.append((time.perf_counter() - started) * 1000)
            with CaptureQueriesContext(connection) as queries:
                response = client.get("/console/history/", query)
            times.sort()
            p95 = times[min(len(times) - 1, max(0, round(0.95 * len(times)) - 1))]
            results.append(
                (scope, name, statistics.median(times), p95, len(queries), len(response.content))
            )
        started = time.perf_counter()
        response = client.get("/console/history/", {"of": of, "range": "30d", "format": "csv"})
        elapsed = (time.perf_counter() - started) * 1000
        results.append((scope, "30d csv", elapsed, elapsed, -1, len(response.content)))
    return results


def explain() -> str:
    node = MetricSource.objects.get(key="node:gpu-000").pk
    end = timezone.now()
    with connection.cursor() as cursor:
        cursor.execute(
            "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) SELECT source_id, bucket, count, "
            "utilization_pct_avg, utilization_pct_max, power_w_avg, power_w_max "
            "FROM scheduling_metricrollup WHERE source_id IN (%s) AND resolution = %s "
            "AND bucket >= %s AND bucket < %s ORDER BY bucket",
            [node, HOURLY, end - timedelta(days=30), end],
        )
        return "\n".join(row[0] for row in cursor.fetchall())


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--nodes", type=int, default=125, help="8 GPUs each (default 125)")
    parser.add_argument("--racks", type=int, default=8)
    parser.add_argument("--days", type=float, default=30.0)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--no-gpu-rollups", action="store_true")
    args = parser.parse_args()
    if connection.vendor != "postgresql":
        print("bench_metric_history measures PostgreSQL: set DATABASE_URL", file=sys.stderr)
        return 2
    setup_test_environment()  # the test client's host name is allowed
    original = connection.settings_dict["NAME"]
    connection.settings_dict["TEST"]["NAME"] = f"{original}_bench_metric_history"
    connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    try:
        report(args)
    finally:
        connection.creation.destroy_test_db(original, verbosity=0)
    return 0


def report(args: argparse.Namespace) -> None:
    started = time.perf_counter()
    ids = build(args.nodes, args.racks)
    written = fill(ids, args.days, not args.no_gpu_rollups)
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE scheduling_metricsample, scheduling_metricrollup")
    print(
        f"bench_metric_history: {args.nodes} nodes, {len(ids['gpu'])} GPUs, {len(MODELS)} "
        f"models, {args.racks} racks, {args.days:g} days on PostgreSQL "
        f"{getattr(connection, 'pg_version', 0) // 10000}; rows: "
        + ", ".join(f"{name} {n:,}" for name, n in written.items())
        + f" (filled in {time.perf_counter() - started:.0f} s)"
    )
    print(f"{'scope':<6} {'range':<8} {'p50 ms':>8} {'p95 ms':>8} {'queries':>8} {'bytes':>9}")
    for scope, name, p50, p95, queries, size in time_pages(args.repeat):
        shown = "" if queries < 0 else str(queries)
        print(f"{scope:<6} {name:<8} {p50:>8.1f} {p95:>8.1f} {shown:>8} {size:>9}")
    print("plan of the 30-day node query:")
    print(explain())


if __name__ == "__main__":
    raise SystemExit(main())
