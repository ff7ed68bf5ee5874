"""The audit trail: new kinds; append-only (filled by the audit change)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("scheduling", "0007_booking_series_quota_requests")]

    operations = [
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
                ],
                max_length=40,
            ),
        ),
    ]
