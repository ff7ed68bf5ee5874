"""The audit trail: new kinds; append-only, enforced by the database (docs/audit.md).

Triggers on ``scheduling_auditevent``, on PostgreSQL and on SQLite: every UPDATE is refused,
and every DELETE but of an event older than the days in the one ``AuditRetention`` row (which
only the retention task writes; no row: nothing may be deleted). The session and node
columns lose their foreign-key constraints and cascades, so that deleting a session, a user
or a node leaves the events, with the ids, alone.

The triggers are created last: SQLite rebuilds the table for the field changes above them,
and a rebuilt table has no triggers. A later migration that alters this table on SQLite must
create them again (``create_triggers``); tests/scheduling/test_audit.py checks the result
of the whole chain on a fresh SQLite database.
"""

import django.db.models.deletion
from django.db import migrations, models

import scheduling.models.audit

REFUSED = "audit events are append-only"

POSTGRESQL_CREATE = [
    f"""
    CREATE OR REPLACE FUNCTION scheduling_auditevent_append_only() RETURNS trigger AS $$
    BEGIN
        IF TG_OP = 'DELETE' AND OLD.at < now() - make_interval(
            days => (SELECT days FROM scheduling_auditretention ORDER BY id LIMIT 1)
        ) THEN
            RETURN OLD;
        END IF;
        RAISE EXCEPTION '{REFUSED}: % refused on event %', TG_OP, OLD.id
            USING ERRCODE = 'restrict_violation';
    END;
    $$ LANGUAGE plpgsql
    """,
    """
    CREATE TRIGGER scheduling_auditevent_append_only
    BEFORE UPDATE OR DELETE ON scheduling_auditevent
    FOR EACH ROW EXECUTE FUNCTION scheduling_auditevent_append_only()
    """,
]
POSTGRESQL_DROP = [
    "DROP TRIGGER IF EXISTS scheduling_auditevent_append_only ON scheduling_auditevent",
    "DROP FUNCTION IF EXISTS scheduling_auditevent_append_only()",
]

# Django stores SQLite datetimes as UTC text ("YYYY-MM-DD HH:MM:SS.ffffff"): julianday reads it.
SQLITE_CREATE = [
    f"""
    CREATE TRIGGER scheduling_auditevent_no_update
    BEFORE UPDATE ON scheduling_auditevent
    BEGIN
        SELECT RAISE(ABORT, '{REFUSED}: UPDATE refused');
    END
    """,
    f"""
    CREATE TRIGGER scheduling_auditevent_no_delete
    BEFORE DELETE ON scheduling_auditevent
    WHEN NOT EXISTS (
        SELECT 1 FROM scheduling_auditretention r
        WHERE r.id = (SELECT min(id) FROM scheduling_auditretention)
        AND julianday(OLD.at) < julianday('now') - r.days
    )
    BEGIN
        SELECT RAISE(ABORT, '{REFUSED}: DELETE refused within the retention period');
    END
    """,
]
SQLITE_DROP = [
    "DROP TRIGGER IF EXISTS scheduling_auditevent_no_update",
    "DROP TRIGGER IF EXISTS scheduling_auditevent_no_delete",
]


def _run(schema_editor, statements_by_vendor) -> None:
    vendor = schema_editor.connection.vendor
    if vendor not in statements_by_vendor:
        raise NotImplementedError(f"no append-only audit triggers for {vendor}")
    for statement in statements_by_vendor[vendor]:
        schema_editor.execute(statement, params=None)  # no placeholders: % is literal


def create_triggers(apps, schema_editor) -> None:
    _run(schema_editor, {"postgresql": POSTGRESQL_CREATE, "sqlite": SQLITE_CREATE})


def drop_triggers(apps, schema_editor) -> None:
    _run(schema_editor, {"postgresql": POSTGRESQL_DROP, "sqlite": SQLITE_DROP})


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
        migrations.AddField(
            model_name="auditevent",
            name="address",
            field=models.GenericIPAddressField(
                blank=True, default=scheduling.models.audit.current_client_address, null=True
            ),
        ),
        migrations.AlterField(
            model_name="auditevent",
            name="node",
            field=models.ForeignKey(
                blank=True,
                db_constraint=False,
                null=True,
                on_delete=django.db.models.deletion.DO_NOTHING,
                related_name="+",
                to="scheduling.node",
            ),
        ),
        migrations.AlterField(
            model_name="auditevent",
            name="session",
            field=models.ForeignKey(
                blank=True,
                db_constraint=False,
                null=True,
                on_delete=django.db.models.deletion.DO_NOTHING,
                related_name="audit",
                to="scheduling.session",
            ),
        ),
        migrations.CreateModel(
            name="AuditRetention",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("days", models.PositiveIntegerField(default=365)),
            ],
            options={
                "constraints": [
                    models.CheckConstraint(
                        condition=models.Q(("days__gte", 183)),
                        name="audit_retention_at_least_6_months",
                    )
                ],
            },
        ),
        migrations.RunPython(create_triggers, drop_triggers),
    ]
