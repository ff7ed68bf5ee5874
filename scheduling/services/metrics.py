"""The numbers Prometheus scrapes at ``/metrics``, computed at scrape time (docs/metrics.md).

The portal runs as several processes (daphne, Celery workers), so nothing here is an
in-process counter: every gauge is read from the database when Prometheus scrapes, with a
handful of aggregate queries, and the one cumulative histogram (scheduling cycle durations)
is kept in Redis, which every process shares.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import lru_cache

import redis
from django.conf import settings
from django.db.models import Count, DurationField, ExpressionWrapper, F, Min, Q, Sum
from django.utils import timezone
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeHistogramMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from ..choices import WAITING_STATES, Purpose, SessionState, SliceKind
from ..models import Alert, Gpu, Node, Session, Slice
from ..models.alerts import OPEN_ALERT_STATES, AlertLevel
from ..models.alerts import Metric as AlertMetric
from .pool import POOL_LEVELS, pool_state, pool_utilisation

log = logging.getLogger(__name__)

# Submit -> RUNNING over the last hour, in seconds (fixed buckets; +Inf is added).
TIME_TO_DESKTOP_WINDOW = timedelta(hours=1)
TIME_TO_DESKTOP_BUCKETS: tuple[float, ...] = (1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)
# One scheduling cycle, in seconds.
CYCLE_BUCKETS: tuple[float, ...] = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
# The Redis hash that holds the cycle histogram: one field per bucket, plus sum and count.
CYCLE_HISTOGRAM_KEY = "deskpool:metrics:cycle_seconds"

NODE_HEALTH = ("healthy", "cordoned", "late", "silent")
MIB = 1024 * 1024
KIB = 1024

# Gpu.metrics field (nodeagent.protocol.GpuMetrics) -> metric name, help, scale.
GPU_GAUGES: tuple[tuple[str, str, str, float], ...] = (
    ("temperature_c", "deskpool_gpu_temperature_celsius", "GPU temperature.", 1.0),
    ("power_w", "deskpool_gpu_power_watts", "GPU power draw.", 1.0),
    ("power_limit_w", "deskpool_gpu_power_limit_watts", "The enforced power cap.", 1.0),
    ("utilization_pct", "deskpool_gpu_utilisation_ratio", "Compute utilisation, 0 to 1.", 0.01),
    ("memory_used_mb", "deskpool_gpu_memory_used_bytes", "GPU memory in use.", float(MIB)),
    ("fan_pct", "deskpool_gpu_fan_ratio", "Fan speed, 0 to 1 of its maximum.", 0.01),
    (
        "pcie_tx_kbps",
        "deskpool_gpu_pcie_transmit_bytes_per_second",
        "PCIe throughput, GPU to host.",
        float(KIB),
    ),
    (
        "pcie_rx_kbps",
        "deskpool_gpu_pcie_receive_bytes_per_second",
        "PCIe throughput, host to GPU.",
        float(KIB),
    ),
)
GPU_COUNTERS: tuple[tuple[str, str, str], ...] = (
    (
        "ecc_corrected_volatile",
        "deskpool_gpu_ecc_corrected_errors",
        "Corrected ECC errors since the driver loaded.",
    ),
    (
        "ecc_uncorrected_volatile",
        "deskpool_gpu_ecc_uncorrected_errors",
        "Uncorrected ECC errors since the driver loaded.",
    ),
)
GPU_LABELS = ["node", "gpu", "uuid"]


@lru_cache(maxsize=1)
def _redis() -> redis.Redis:
    return redis.Redis.from_url(settings.LOCK_REDIS_URL, socket_timeout=2, decode_responses=True)


def _bucket_field(bound: float) -> str:
    return f"le:{bound:g}"


def observe_cycle_duration(seconds: float) -> None:
    """Add one scheduling cycle's duration to the shared histogram (one Redis round trip)."""
    pipe = _redis().pipeline(transaction=False)
    for bound in CYCLE_BUCKETS:
        if seconds <= bound:
            pipe.hincrby(CYCLE_HISTOGRAM_KEY, _bucket_field(bound), 1)
    pipe.hincrby(CYCLE_HISTOGRAM_KEY, "count", 1)
    pipe.hincrbyfloat(CYCLE_HISTOGRAM_KEY, "sum", seconds)
    try:
        pipe.execute()
    except redis.RedisError:
        log.warning("metrics: could not record a cycle duration", exc_info=True)


def _cycle_histogram() -> Metric | None:
    try:
        stored = _redis().hgetall(CYCLE_HISTOGRAM_KEY)
    except redis.RedisError:
        log.warning("metrics: the cycle histogram is not readable", exc_info=True)
        return None
    fields = {str(key): float(value) for key, value in stored.items()}
    count = fields.get("count", 0.0)
    buckets = [(floatToGoString(b), fields.get(_bucket_field(b), 0.0)) for b in CYCLE_BUCKETS]
    family = HistogramMetricFamily(
        "deskpool_scheduling_cycle_duration_seconds",
        "Duration of scheduling cycles, cumulative since Redis last lost its data.",
    )
    family.add_metric([], buckets + [("+Inf", count)], fields.get("sum", 0.0))
    return family


def _gauge(name: str, documentation: str, labels: Sequence[str] = ()) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, labels=list(labels))


def _sessions() -> Iterator[Metric]:
    by_state = {
        row["state"]: row["n"]
        for row in Session.objects.order_by().values("state").annotate(n=Count("pk"))
    }
    family = _gauge("deskpool_sessions", "Sessions in each state.", ["state"])
    for state in SessionState:
        family.add_metric([state.value], by_state.get(state.value, 0))
    yield family


def _queue(now: datetime) -> Iterator[Metric]:
    rows = {
        row["purpose"]: row
        for row in Session.objects.filter(state__in=WAITING_STATES)
        .order_by()
        .values("purpose")
        .annotate(
            n=Count("pk"), blocked=Count("pk", filter=Q(blocked=True)), oldest=Min("created_at")
        )
    }
    depth = _gauge("deskpool_queue_depth", "Requests waiting (queued or preempted).", ["tier"])
    blocked = _gauge(
        "deskpool_queue_blocked", "Waiting requests held back by a quota or rule.", ["tier"]
    )
    oldest = _gauge(
        "deskpool_queue_oldest_wait_seconds",
        "Age of the oldest waiting request (absent when none waits).",
        ["tier"],
    )
    for purpose in Purpose:
        row = rows.get(purpose.value)
        depth.add_metric([purpose.value], row["n"] if row else 0)
        blocked.add_metric([purpose.value], row["blocked"] if row else 0)
        if row:
            oldest.add_metric([purpose.value], max((now - row["oldest"]).total_seconds(), 0.0))
    yield from (depth, blocked, oldest)


def _time_to_desktop(now: datetime) -> Iterator[Metric]:
    wait = ExpressionWrapper(F("started_at") - F("created_at"), output_field=DurationField())
    counts = {
        _bucket_field(b): Count("pk", filter=Q(wait__lte=timedelta(seconds=b)))
        for b in TIME_TO_DESKTOP_BUCKETS
    }
    totals = (
        Session.objects.filter(started_at__gte=now - TIME_TO_DESKTOP_WINDOW)
        .order_by()
        .annotate(wait=wait)
        .aggregate(count=Count("pk"), total=Sum("wait"), **counts)
    )
    family = GaugeHistogramMetricFamily(
        "deskpool_time_to_desktop_seconds",
        "Submit to RUNNING of the sessions that started in the last hour.",
    )
    buckets = [
        (floatToGoString(b), float(totals[_bucket_field(b)])) for b in TIME_TO_DESKTOP_BUCKETS
    ]
    total = totals["total"].total_seconds() if totals["total"] is not None else 0.0
    family.add_metric([], buckets + [("+Inf", float(totals["count"]))], total)
    yield family


def node_health(node: Node, now: datetime) -> str:
    """One word per node: silent, late (heartbeat overdue), cordoned, or healthy."""
    if node.last_heartbeat is None:
        return "silent"
    age = (now - node.last_heartbeat).total_seconds()
    if age > settings.NODE_LOST_AFTER_S:
        return "silent"
    if age > settings.NODE_HEARTBEAT_TIMEOUT_S:
        return "late"
    return "cordoned" if node.cordoned else "healthy"


def _nodes(now: datetime) -> Iterator[Metric]:
    nodes = list(Node.objects.only("hostname", "last_heartbeat", "cordoned"))
    age = _gauge(
        "deskpool_node_heartbeat_age_seconds",
        "Seconds since the node's agent last sent a heartbeat (absent before the first).",
        ["node"],
    )
    cordoned = _gauge("deskpool_node_cordoned", "1 when the node is cordoned.", ["node"])
    health = _gauge("deskpool_nodes", "Nodes by health.", ["health"])
    counted = dict.fromkeys(NODE_HEALTH, 0)
    for node in nodes:
        counted[node_health(node, now)] += 1
        cordoned.add_metric([node.hostname], 1 if node.cordoned else 0)
        if node.last_heartbeat is not None:
            age.add_metric([node.hostname], max((now - node.last_heartbeat).total_seconds(), 0.0))
    for word, n in counted.items():
        health.add_metric([word], n)
    yield from (age, cordoned, health)


def _gpus() -> Iterator[Metric]:
    live = Q(slices__allocation__released_at__isnull=True, slices__allocation__isnull=False)
    gpus = (
        Gpu.objects.filter(present=True)
        .order_by("node__hostname", "index")
        .values("uuid", "index", "memory_mb", "metrics", "node__hostname")
        .annotate(held=Count("slices__allocation", filter=live))
    )
    in_use = _gauge("deskpool_gpus", "Present GPUs, in use (any slice held) or idle.", ["state"])
    held = _gauge("deskpool_gpu_slices_held", "Slices of the GPU held now.", GPU_LABELS)
    total_memory = _gauge("deskpool_gpu_memory_total_bytes", "GPU memory.", GPU_LABELS)
    gauges = {key: _gauge(name, doc, GPU_LABELS) for key, name, doc, _ in GPU_GAUGES}
    scales = {key: scale for key, _, _, scale in GPU_GAUGES}
    counters = {
        key: CounterMetricFamily(name, doc, labels=GPU_LABELS) for key, name, doc in GPU_COUNTERS
    }
    xid = _gauge(
        "deskpool_gpu_xid_errors", "XID errors the GPU's last heartbeat reported.", GPU_LABELS
    )
    using = idle = 0
    for gpu in gpus:
        labels = [gpu["node__hostname"], str(gpu["index"]), gpu["uuid"]]
        using, idle = (using + 1, idle) if gpu["held"] else (using, idle + 1)
        held.add_metric(labels, gpu["held"])
        total_memory.add_metric(labels, gpu["memory_mb"] * MIB)
        readings = gpu["metrics"] if isinstance(gpu["metrics"], dict) else {}
        for key, family in gauges.items():
            if isinstance(readings.get(key), int | float):
                family.add_metric(labels, float(readings[key]) * scales[key])
        for key, counter in counters.items():
            if isinstance(readings.get(key), int):
                counter.add_metric(labels, float(readings[key]))
        if isinstance(readings.get("xid_errors"), list):
            xid.add_metric(labels, len(readings["xid_errors"]))
    in_use.add_metric(["in_use"], using)
    in_use.add_metric(["idle"], idle)
    yield from (in_use, held, total_memory, *gauges.values(), *counters.values(), xid)


def _slices() -> Iterator[Metric]:
    live = Q(allocation__released_at__isnull=True, allocation__isnull=False)
    rows = {
        row["kind"]: row
        for row in Slice.objects.filter(present=True, gpu__present=True)
        .order_by()
        .values("kind")
        .annotate(n=Count("pk", distinct=True), held=Count("allocation", filter=live))
    }
    family = _gauge("deskpool_slices", "Present slices by kind, held or free.", ["kind", "state"])
    for kind in SliceKind:
        row = rows.get(kind.value)
        n, held = (row["n"], row["held"]) if row else (0, 0)
        family.add_metric([kind.value, "held"], held)
        family.add_metric([kind.value, "free"], n - held)
    yield family


def _pool() -> Iterator[Metric]:
    """Utilisation, and the "Pool usage" rule's levels and open alert (services.pool)."""
    levels, current = pool_state()  # one query
    yield GaugeMetricFamily(
        "deskpool_pool_utilisation_ratio",
        "Share of the pool's GPU capacity held by sessions, 0 to 1 (what admission uses).",
        value=pool_utilisation(),
    )
    level = GaugeMetricFamily(
        "deskpool_pool_alert_level",
        "The pool's alert level: 0 ok, 1 warn, 2 block.",
        value=POOL_LEVELS.index(current),
    )
    state = _gauge("deskpool_pool_alert", "1 for the pool's current alert level.", ["level"])
    for word in POOL_LEVELS:
        state.add_metric([word], 1 if current == word else 0)
    thresholds = _gauge(
        "deskpool_pool_threshold_ratio", "The pool's alert thresholds, 0 to 1.", ["level"]
    )
    thresholds.add_metric(["warn"], levels.warn_percent / 100)
    thresholds.add_metric(["block"], levels.block_percent / 100)
    yield from (level, state, thresholds)


def _alerts() -> Iterator[Metric]:
    counted = {
        (row["rule__metric"], row["level"], row["state"]): row["n"]
        for row in Alert.objects.open()
        .order_by()
        .values("rule__metric", "level", "state")
        .annotate(n=Count("pk"))
    }
    family = _gauge(
        "deskpool_alerts",
        "Open alerts (firing or acknowledged) by the rule's metric, level and state.",
        ["metric", "level", "state"],
    )
    for metric in AlertMetric:
        for level in AlertLevel:
            for state in OPEN_ALERT_STATES:
                key = (metric.value, level.value, state.value)
                family.add_metric(list(key), counted.get(key, 0))
    yield family


@dataclass(eq=False)
class DeskpoolCollector(Collector):
    """Every Deskpool metric, read from the database (and Redis) when collected."""

    now: datetime | None = None

    def collect(self) -> Iterable[Metric]:
        now = self.now or timezone.now()
        yield from _sessions()
        yield from _queue(now)
        yield from _time_to_desktop(now)
        yield from _nodes(now)
        yield from _gpus()
        yield from _slices()
        yield from _pool()
        yield from _alerts()
        cycle = _cycle_histogram()
        if cycle is not None:
            yield cycle


def render_metrics(now: datetime | None = None) -> bytes:
    """The Prometheus text exposition of every Deskpool metric, as of ``now``."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(DeskpoolCollector(now))
    return generate_latest(registry)
