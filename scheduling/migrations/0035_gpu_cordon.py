"""A sick GPU is cordoned (scheduling.services.gpu_cordon): Gpu.cordoned, cordon_reason and
cordoned_at; the audit kinds gpu.cordoned, gpu.cordon_cleared and gpu.drained; the alert
metric gpu_cordoned with its default rule "GPU cordoned" for pools that already have rules,
and the alert's detail (the causes)."""

from django.db import migrations, models


def add_cordon_rule(apps, schema_editor):
    """Pools that already have rules get the new one (a new pool gets every default rule
    from scheduling.services.alerts.ensure_default_rules)."""
    AlertRule = apps.get_model("scheduling", "AlertRule")
    # Only the "Pool usage" rule (migration 0031 makes it from the policy): the defaults,
    # this one included, still come on first use (ensure_default_rules).
    if AlertRule.objects.exclude(metric="pool_usage").exists():
        AlertRule.objects.get_or_create(
            name="GPU cordoned",
            defaults=dict(metric="gpu_cordoned", scope="gpu", warning=1.0, critical=1.0,
                          recovery=1.0),
        )


class Migration(migrations.Migration):
    dependencies = [
        ("scheduling", "0034_mig_layout_check"),
        ("scheduling", "0034_away_notices"),
    ]

    operations = [
        migrations.AddField(
            model_name="gpu",
            name="cordoned",
            field=models.BooleanField(default=False),
        ),
        migrations.AddField(
            model_name="gpu",
            name="cordon_reason",
            field=models.CharField(blank=True, max_length=500),
        ),
        migrations.AddField(
            model_name="gpu",
            name="cordoned_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="alert",
            name="detail",
            field=models.CharField(
                blank=True,
                help_text="What caused it, where the rule says: a GPU's cordon.",
                max_length=500,
            ),
        ),
        migrations.AlterField(
            model_name="alertrule",
            name="metric",
            field=models.CharField(
                choices=[
                    ('gpu_memory', 'GPU memory use (%)'),
                    ('gpu_utilisation', 'GPU compute utilisation (%)'),
                    ('gpu_temperature', 'GPU temperature (°C)'),
                    ('gpu_xid_errors', 'GPU XID errors (in the last report)'),
                    ('node_silence', "Seconds since the node's last heartbeat"),
                    ('rack_power', 'Rack power draw (% of its budget)'),
                    ('pool_usage', 'Pool usage (% of GPU capacity)'),
                    ('queue_length', 'Waiting requests'),
                    ('gpu_claims', "Registrations refused for listing this node's GPUs (last hour)"),
                    ('start_failures', 'Desktops that failed to start on the node (last hour)'),
                    ('gpu_mig_layout', 'MIG layout refused (1: refused, 0: accepted)'),
                    ('gpu_cordoned', 'GPU cordoned for ill health (1: cordoned)'),
                ],
                max_length=30,
            ),
        ),
        migrations.AlterField(
            model_name="auditevent",
            name="kind",
            field=models.CharField(
                choices=[
                    ('session.submitted', 'Session Submitted'),
                    ('session.transition', 'Session Transition'),
                    ('session.placed', 'Session Placed'),
                    ('node.registered', 'Node Registered'),
                    ('node.claim_refused', 'Node Claim Refused'),
                    ('node.silent', 'Node Silent'),
                    ('node.cordoned', 'Node Cordoned'),
                    ('node.cordon_cleared', 'Node Cordon Cleared'),
                    ('node.join_token_created', 'Join Token Created'),
                    ('scheduler.cycle', 'Cycle'),
                    ('session.preempted', 'Session Preempted'),
                    ('session.blocked', 'Session Blocked'),
                    ('pool.alert', 'Pool Alert'),
                    ('booking.created', 'Booking Created'),
                    ('booking.cancelled', 'Booking Cancelled'),
                    ('policy.changed', 'Policy Changed'),
                    ('booking.series_created', 'Booking Series Created'),
                    ('booking.changed', 'Booking Changed'),
                    ('thesis.granted', 'Thesis Granted'),
                    ('thesis.revoked', 'Thesis Revoked'),
                    ('thesis.ended', 'Thesis Ended'),
                    ('session.demoted', 'Session Demoted'),
                    ('course.roster_imported', 'Roster Imported'),
                    ('course.roster_changed', 'Roster Changed'),
                    ('course.ta_grants_changed', 'Ta Grants Changed'),
                    ('course.settings_changed', 'Course Settings Changed'),
                    ('course.class_started', 'Class Started'),
                    ('course.class_stopped', 'Class Stopped'),
                    ('quota.requested', 'Quota Requested'),
                    ('quota.answered', 'Quota Answered'),
                    ('quota.self_answer_refused', 'Quota Self Answer Refused'),
                    ('audit.pruned', 'Audit Pruned'),
                    ('usage.prices_changed', 'Usage Prices Changed'),
                    ('alert.rule_changed', 'Alert Rule Changed'),
                    ('alert.raised', 'Alert Raised'),
                    ('alert.escalated', 'Alert Escalated'),
                    ('alert.acknowledged', 'Alert Acknowledged'),
                    ('alert.resolved', 'Alert Resolved'),
                    ('session.boosted', 'Session Boosted'),
                    ('session.cancelled', 'Session Cancelled'),
                    ('signin.locked_out', 'Signin Locked Out'),
                    ('signin.sessions_ended', 'Sessions Ended'),
                    ('session.extended', 'Session Extended'),
                    ('node.address_changed', 'Node address changed'),
                    ('desktop.opened', 'Desktop opened'),
                    ('desktop.sound_opened', 'Desktop sound opened'),
                    ('signin.token_issued', 'API token issued'),
                    ('signin.token_revoked', 'API token revoked'),
                    ('signin.password_changed', 'Password changed'),
                    ('signin.password_set', 'Password set by an admin'),
                    ('home.uploaded', 'Home file uploaded'),
                    ('home.downloaded', 'Home file downloaded'),
                    ('home.deleted', 'Home file deleted'),
                    ('course.file_uploaded', 'Course file uploaded'),
                    ('course.file_deleted', 'Course file deleted'),
                    ('course.folder_cap_changed', 'Course folder cap changed'),
                    ('node.gateway_key_rotated', 'Gateway key rotated'),
                    ('gpu.cordoned', 'GPU cordoned'),
                    ('gpu.cordon_cleared', 'GPU uncordoned'),
                    ('gpu.drained', 'GPU drained'),
                ],
                max_length=40,
            ),
        ),
        migrations.RunPython(add_cordon_rule, migrations.RunPython.noop),
    ]
