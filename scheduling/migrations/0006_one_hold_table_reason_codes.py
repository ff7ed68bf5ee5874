"""Every slice hold is an Allocation (warm desktops too); session reasons become codes."""

import django.core.serializers.json
import django.db.models.deletion
from django.db import migrations, models


def reasons_forward(apps, schema_editor):
    Session = apps.get_model("scheduling", "Session")
    for session in Session.objects.exclude(reason="").only("pk", "reason"):
        Session.objects.filter(pk=session.pk).update(
            reason_code="note", reason_params={"text": session.reason}
        )


def reasons_backward(apps, schema_editor):
    Session = apps.get_model("scheduling", "Session")
    for session in Session.objects.filter(reason_code="note"):
        Session.objects.filter(pk=session.pk).update(
            reason=str(session.reason_params.get("text", ""))[:300]
        )


def warm_holds_forward(apps, schema_editor):
    WarmDesktop = apps.get_model("scheduling", "WarmDesktop")
    Allocation = apps.get_model("scheduling", "Allocation")
    for warm in WarmDesktop.objects.all():
        Allocation.objects.create(warm_id=warm.pk, node_id=warm.node_id, slice_id=warm.slice_id)


def warm_holds_backward(apps, schema_editor):
    WarmDesktop = apps.get_model("scheduling", "WarmDesktop")
    Allocation = apps.get_model("scheduling", "Allocation")
    for hold in Allocation.objects.filter(warm__isnull=False, released_at=None):
        WarmDesktop.objects.filter(pk=hold.warm_id).update(slice_id=hold.slice_id)
    Allocation.objects.filter(warm__isnull=False).delete()


class Migration(migrations.Migration):
    dependencies = [("scheduling", "0005_agent_inventory")]

    operations = [
        migrations.AddField(
            model_name="session",
            name="reason_code",
            field=models.CharField(blank=True, max_length=40),
        ),
        migrations.AddField(
            model_name="session",
            name="reason_params",
            field=models.JSONField(
                blank=True, default=dict, encoder=django.core.serializers.json.DjangoJSONEncoder
            ),
        ),
        migrations.RunPython(reasons_forward, reasons_backward),
        migrations.RemoveField(model_name="session", name="reason"),
        migrations.AlterField(
            model_name="allocation",
            name="session",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="allocations",
                to="scheduling.session",
            ),
        ),
        migrations.AddField(
            model_name="allocation",
            name="warm",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="holds",
                to="scheduling.warmdesktop",
            ),
        ),
        migrations.RunPython(warm_holds_forward, warm_holds_backward),
        migrations.RemoveConstraint(model_name="warmdesktop", name="one_warm_desktop_per_slice"),
        migrations.RemoveField(model_name="warmdesktop", name="slice"),
        migrations.AddConstraint(
            model_name="allocation",
            constraint=models.CheckConstraint(
                condition=models.Q(("session__isnull", False), ("warm__isnull", True))
                | models.Q(("session__isnull", True), ("warm__isnull", False)),
                name="allocation_has_one_holder",
            ),
        ),
    ]
