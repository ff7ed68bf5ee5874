# MIG checked (issue 37 item 2): a GPU's refused MIG layout and its alert rule.

from django.db import migrations, models


def add_mig_layout_rule(apps, schema_editor):
    """Pools that already have rules get the new one (a new pool gets every default rule
    from scheduling.services.alerts.ensure_default_rules)."""
    AlertRule = apps.get_model("scheduling", "AlertRule")
    # Only the "Pool usage" rule (migration 0031 makes it from the policy): the defaults,
    # this one included, still come on first use (ensure_default_rules).
    if AlertRule.objects.exclude(metric="pool_usage").exists():
        AlertRule.objects.get_or_create(
            name="MIG layout refused",
            defaults=dict(metric="gpu_mig_layout", scope="gpu", warning=1.0, recovery=1.0),
        )


class Migration(migrations.Migration):
    dependencies = [
        ("scheduling", "0033_metric_history_series"),
    ]

    operations = [
        migrations.AddField(
            model_name="gpu",
            name="mig_layout_problem",
            field=models.JSONField(blank=True, null=True),
        ),
        migrations.AlterField(
            model_name="alertrule",
            name="metric",
            field=models.CharField(
                choices=[
                    ("gpu_memory", "GPU memory use (%)"),
                    ("gpu_utilisation", "GPU compute utilisation (%)"),
                    ("gpu_temperature", "GPU temperature (°C)"),
                    ("gpu_xid_errors", "GPU XID errors (in the last report)"),
                    ("node_silence", "Seconds since the node's last heartbeat"),
                    ("rack_power", "Rack power draw (% of its budget)"),
                    ("pool_usage", "Pool usage (% of GPU capacity)"),
                    ("queue_length", "Waiting requests"),
                    (
                        "gpu_claims",
                        "Registrations refused for listing this node's GPUs (last hour)",
                    ),
                    ("start_failures", "Desktops that failed to start on the node (last hour)"),
                    ("gpu_mig_layout", "MIG layout refused (1: refused, 0: accepted)"),
                ],
                max_length=30,
            ),
        ),
        migrations.RunPython(add_mig_layout_rule, migrations.RunPython.noop),
    ]
