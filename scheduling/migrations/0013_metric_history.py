"""Metric history (docs/monitoring.md): sources, raw samples and rollups, one row per (source,
time) or (source, resolution, bucket) with one four-byte column per metric."""

import django.db.models.deletion
from django.db import migrations, models

import scheduling.models.metrics

# The metrics as this migration made them, frozen here: later ones come with their own
# migration (0033_metric_history_series), never by editing this list.
METRICS = (
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
    "queue_wait_s",
    "time_to_desktop_s",
    "completion_ratio",
    "runs_ended",
    "lost",
    "failed",
    "preempted",
)
AGGREGATES = ("min", "max", "avg")


def _real() -> models.Field:
    return scheduling.models.metrics.RealField(blank=True, null=True)


def _source() -> models.Field:
    return models.ForeignKey(
        db_index=False,
        on_delete=django.db.models.deletion.CASCADE,
        related_name="+",
        to="scheduling.metricsource",
    )


class Migration(migrations.Migration):
    dependencies = [("scheduling", "0012_console_queue")]

    operations = [
        migrations.CreateModel(
            name="MetricSource",
            fields=[
                ("id", models.AutoField(primary_key=True, serialize=False)),
                (
                    "kind",
                    models.CharField(
                        choices=[("gpu", "Gpu"), ("slice", "Slice"), ("pool", "Pool")],
                        max_length=8,
                    ),
                ),
                ("key", models.CharField(max_length=100, unique=True)),
                (
                    "gpu_uuid",
                    models.CharField(blank=True, help_text="A slice's GPU.", max_length=100),
                ),
                (
                    "node",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to="scheduling.node",
                    ),
                ),
            ],
        ),
        migrations.CreateModel(
            name="MetricSample",
            fields=[
                (
                    "pk",
                    models.CompositePrimaryKey(
                        "source",
                        "time",
                        blank=True,
                        editable=False,
                        primary_key=True,
                        serialize=False,
                    ),
                ),
                ("time", models.DateTimeField()),
                *[(name, _real()) for name in METRICS],
                ("source", _source()),
            ],
            options={"indexes": [models.Index(fields=["time"], name="metric_sample_time")]},
        ),
        migrations.CreateModel(
            name="MetricRollup",
            fields=[
                (
                    "pk",
                    models.CompositePrimaryKey(
                        "source",
                        "resolution",
                        "bucket",
                        blank=True,
                        editable=False,
                        primary_key=True,
                        serialize=False,
                    ),
                ),
                ("resolution", models.PositiveIntegerField()),
                ("bucket", models.DateTimeField(help_text="Start of the bucket.")),
                ("count", models.PositiveIntegerField()),
                *[(f"{name}_{agg}", _real()) for name in METRICS for agg in AGGREGATES],
                ("source", _source()),
            ],
            options={
                "indexes": [
                    models.Index(fields=["resolution", "bucket"], name="metric_rollup_bucket")
                ]
            },
        ),
    ]
