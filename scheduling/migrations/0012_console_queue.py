"""The console's queue and catalogue (issue 12): an admin's boost on a waiting request; a
CPU-only desktop profile (no slice kinds) can be saved; the audit kinds of boost and cancel."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("scheduling", "0011_console_pool")]

    operations = [
        migrations.AddField(
            model_name="session",
            name="boosted_at",
            field=models.DateTimeField(
                blank=True,
                help_text="An admin's boost: served before its tier's others.",
                null=True,
            ),
        ),
        migrations.AlterField(
            model_name="desktopprofile",
            name="allowed_kinds",
            field=models.JSONField(
                blank=True,
                default=list,
                help_text="Slice kinds: mig, share, whole; none if CPU-only.",
            ),
        ),
        migrations.AlterField(
            model_name="auditevent",
            name="kind",
            field=models.CharField(
                choices=[
                    ("session.submitted", "Session Submitted"),
                    ("session.transition", "Session Transition"),
                    ("session.placed", "Session Placed"),
                    ("node.registered", "Node Registered"),
                    ("node.silent", "Node Silent"),
                    ("node.cordoned", "Node Cordoned"),
                    ("node.cordon_cleared", "Node Cordon Cleared"),
                    ("node.join_token_created", "Join Token Created"),
                    ("scheduler.cycle", "Cycle"),
                    ("session.preempted", "Session Preempted"),
                    ("session.blocked", "Session Blocked"),
                    ("pool.alert", "Pool Alert"),
                    ("booking.created", "Booking Created"),
                    ("booking.cancelled", "Booking Cancelled"),
                    ("policy.changed", "Policy Changed"),
                    ("booking.series_created", "Booking Series Created"),
                    ("booking.changed", "Booking Changed"),
                    ("thesis.granted", "Thesis Granted"),
                    ("thesis.revoked", "Thesis Revoked"),
                    ("thesis.ended", "Thesis Ended"),
                    ("session.demoted", "Session Demoted"),
                    ("course.roster_imported", "Roster Imported"),
                    ("course.roster_changed", "Roster Changed"),
                    ("course.ta_grants_changed", "Ta Grants Changed"),
                    ("course.settings_changed", "Course Settings Changed"),
                    ("course.class_started", "Class Started"),
                    ("course.class_stopped", "Class Stopped"),
                    ("quota.requested", "Quota Requested"),
                    ("quota.answered", "Quota Answered"),
                    ("audit.pruned", "Audit Pruned"),
                    ("usage.prices_changed", "Usage Prices Changed"),
                    ("alert.rule_changed", "Alert Rule Changed"),
                    ("alert.raised", "Alert Raised"),
                    ("alert.escalated", "Alert Escalated"),
                    ("alert.acknowledged", "Alert Acknowledged"),
                    ("alert.resolved", "Alert Resolved"),
                    ("session.boosted", "Session Boosted"),
                    ("session.cancelled", "Session Cancelled"),
                ],
                max_length=40,
            ),
        ),
    ]
