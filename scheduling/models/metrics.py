"""Metric history (docs/monitoring.md): raw samples and their rollups, designed for size.

A *source* is one series owner: a GPU, a slice device (a MIG instance), the pool, or one
tier of the pool. A sample is one row per (source, time) with one column per metric (a
heartbeat's readings of one GPU are one row, not twelve); a metric a source does not report
is NULL, which PostgreSQL stores as one bit. Values are single-precision (``real``, four
bytes): seven significant digits are plenty for temperatures, watts and counters. Rollups
keep, per (source, resolution, bucket), the sample count and each metric's min, max and avg.
"""

from __future__ import annotations

from typing import Any

from django.db import models

# Hardware and performance readings of GPUs and slices (GpuMetrics / SliceMetrics on the
# wire), then the pool's business series (written by the rollup task every few minutes).
DEVICE_METRICS = (
    "utilization_pct",
    "memory_used_mb",
    "temperature_c",
    "power_w",
    "fan_pct",
    "pcie_tx_kbps",
    "pcie_rx_kbps",
    "ecc_corrected",
    "ecc_uncorrected",
    "xid_errors",
)
POOL_METRICS = (
    "queue_wait_s",
    "time_to_desktop_s",
    "completion_ratio",
    "runs_ended",
    "lost",
    "failed",
    "preempted",
    "queue_length",  # a tier's waiting requests when the sample was taken
    "queue_wait_p95_s",  # a tier's 95th percentile of submit to placement (nearest rank)
    "started",  # desktops that reached RUNNING since the previous sample
)
# Written for a group of GPUs (a model, a node, a rack) besides the device metrics.
GROUP_METRICS = ("power_budget_w",)  # a rack's power budget (its nodes' label)
METRICS = DEVICE_METRICS + POOL_METRICS + GROUP_METRICS
AGGREGATES = ("min", "max", "avg")

RAW = 0  # resolution 0: the samples themselves
FIVE_MINUTES = 300
HOURLY = 3600


class RealField(models.FloatField):
    """A float stored in four bytes (PostgreSQL ``real``) instead of eight."""

    def db_type(self, connection: Any) -> str | None:
        return "real" if connection.vendor == "postgresql" else super().db_type(connection)


class MetricSource(models.Model):
    """Who a series belongs to: ``gpu`` (key: GPU UUID), ``slice`` (key: MIG UUID), ``pool``
    (key ``pool``) or a tier (key ``tier:<purpose>``), or ``group``: the GPUs of one model,
    node or rack (key ``model:<model>``, ``node:<hostname>``, ``rack:<rack>``), whose device
    metrics are their GPUs' taken together. Sources outlive their node."""

    class Kind(models.TextChoices):
        GPU = "gpu"
        SLICE = "slice"
        POOL = "pool"
        GROUP = "group"

    id = models.AutoField(primary_key=True)  # four bytes in every sample row
    kind = models.CharField(max_length=8, choices=Kind.choices)
    key = models.CharField(max_length=100, unique=True)
    node = models.ForeignKey(
        "Node", null=True, blank=True, related_name="+", on_delete=models.SET_NULL
    )
    gpu_uuid = models.CharField(max_length=100, blank=True, help_text="A slice's GPU.")

    def __str__(self) -> str:
        return self.key


class MetricSample(models.Model):
    """One source's readings at one time (full resolution, kept METRICS_RAW_HOURS)."""

    pk = models.CompositePrimaryKey("source", "time")
    source = models.ForeignKey(
        MetricSource, related_name="+", on_delete=models.CASCADE, db_index=False
    )
    time = models.DateTimeField()
    for _name in METRICS:
        locals()[_name] = RealField(null=True, blank=True)
    del _name

    class Meta:
        indexes = [models.Index(fields=["time"], name="metric_sample_time")]

    def __str__(self) -> str:
        return f"{self.source_id} @ {self.time:%Y-%m-%d %H:%M:%S}"


class MetricRollup(models.Model):
    """One source's bucket at one resolution (300 s or 3600 s): count, min, max, avg."""

    pk = models.CompositePrimaryKey("source", "resolution", "bucket")
    source = models.ForeignKey(
        MetricSource, related_name="+", on_delete=models.CASCADE, db_index=False
    )
    resolution = models.PositiveIntegerField()
    bucket = models.DateTimeField(help_text="Start of the bucket.")
    count = models.PositiveIntegerField()
    for _name in METRICS:
        for _agg in AGGREGATES:
            locals()[f"{_name}_{_agg}"] = RealField(null=True, blank=True)
    del _name, _agg

    class Meta:
        indexes = [
            models.Index(fields=["resolution", "bucket"], name="metric_rollup_bucket"),
        ]

    def __str__(self) -> str:
        return f"{self.source_id} @ {self.bucket:%Y-%m-%d %H:%M} /{self.resolution}s"
