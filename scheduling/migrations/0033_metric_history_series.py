"""Metric history series for the console's history pages (docs/metrics.md): a tier's queue
length and wait p95, the desktops started, a rack's power budget, and the ``group`` sources
(a GPU model, a node, a rack)."""

import scheduling.models.metrics
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('scheduling', '0032_closed_reports'),
    ]

    operations = [
        migrations.AddField(
            model_name='metricrollup',
            name='power_budget_w_avg',
            field=scheduling.models.metrics.RealField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='metricrollup',
            name='power_budget_w_max',
            field=scheduling.models.metrics.RealField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='metricrollup',
            name='power_budget_w_min',
            field=scheduling.models.metrics.RealField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='metricrollup',
            name='queue_length_avg',
            field=scheduling.models.metrics.RealField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='metricrollup',
            name='queue_length_max',
            field=scheduling.models.metrics.RealField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='metricrollup',
            name='queue_length_min',
            field=scheduling.models.metrics.RealField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='metricrollup',
            name='queue_wait_p95_s_avg',
            field=scheduling.models.metrics.RealField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='metricrollup',
            name='queue_wait_p95_s_max',
            field=scheduling.models.metrics.RealField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='metricrollup',
            name='queue_wait_p95_s_min',
            field=scheduling.models.metrics.RealField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='metricrollup',
            name='started_avg',
            field=scheduling.models.metrics.RealField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='metricrollup',
            name='started_max',
            field=scheduling.models.metrics.RealField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='metricrollup',
            name='started_min',
            field=scheduling.models.metrics.RealField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='metricsample',
            name='power_budget_w',
            field=scheduling.models.metrics.RealField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='metricsample',
            name='queue_length',
            field=scheduling.models.metrics.RealField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='metricsample',
            name='queue_wait_p95_s',
            field=scheduling.models.metrics.RealField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='metricsample',
            name='started',
            field=scheduling.models.metrics.RealField(blank=True, null=True),
        ),
        migrations.AlterField(
            model_name='metricsource',
            name='kind',
            field=models.CharField(choices=[('gpu', 'Gpu'), ('slice', 'Slice'), ('pool', 'Pool'), ('group', 'Group')], max_length=8),
        ),
    ]
