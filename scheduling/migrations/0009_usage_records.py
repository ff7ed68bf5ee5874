"""Accounting: one usage record per run of a session, and the internal price list.

Sessions that ran before this migration get one record each, for their last run (the only
one a session remembered): open while the session is still on its node, closed otherwise.
"""

from datetime import timedelta
from decimal import ROUND_HALF_UP, Decimal

import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models

ON_NODE = ("RUNNING", "PREEMPTING", "STOPPING")
RAN_TO_AN_END = ("ENDED", "FAILED", "LOST", "EXPIRED")
PLACES = Decimal("0.000001")


def _held(part, start, end):
    microseconds = max(0, (end - start) // timedelta(microseconds=1))
    hours = Decimal(microseconds) / Decimal(3_600_000_000)
    return (Decimal(str(part)) * hours).quantize(PLACES, rounding=ROUND_HALF_UP)


def _joined(values):
    return ",".join(sorted({v for v in values if v}))


def backfill(apps, schema_editor):
    Session = apps.get_model("scheduling", "Session")
    Allocation = apps.get_model("scheduling", "Allocation")
    UsageRecord = apps.get_model("scheduling", "UsageRecord")
    Member = apps.get_model("portal", "Member")
    ran = Session.objects.filter(started_at__isnull=False, state__in=ON_NODE + RAN_TO_AN_END)
    for s in ran.select_related("user", "course", "profile", "node").iterator():
        holds = [
            a
            for a in Allocation.objects.filter(session_id=s.pk).select_related("slice__gpu", "node")
            if a.released_at is None or a.released_at >= s.started_at
        ]
        slices = [a.slice for a in holds if a.slice is not None]
        member = Member.objects.filter(user_id=s.user_id).first()
        department = (member.department if member else "") or (
            s.course.department if s.course else ""
        )
        share = round(sum(x.milli for x in slices) / 1000, 4)
        end = s.ended_at if s.state in RAN_TO_AN_END else None
        gpu_hours = _held(share, s.started_at, end) if end else Decimal(0)
        UsageRecord.objects.create(
            session_id=s.pk,
            run=1,
            user_id=s.user_id,
            username=s.user.username,
            course_code=s.course.code if s.course else "",
            department=department,
            purpose=s.purpose,
            profile_slug=s.profile.slug,
            booking_id=s.booking_id,
            slice_kind=_joined(x.kind for x in slices),
            mig_profile=_joined(x.profile for x in slices),
            gpu_model=_joined(x.gpu.model for x in slices),
            node_hostname=_joined(a.node.hostname for a in holds)
            or (s.node.hostname if s.node else ""),
            slices=len(slices),
            gpu_share=share,
            compute_units=s.compute_units,
            started_at=s.started_at,
            ended_at=max(end, s.started_at) if end else None,
            end_state=s.state if end else "",
            gpu_hours=gpu_hours,
            cu_hours=_held(s.compute_units, s.started_at, end) if end else Decimal(0),
        )


class Migration(migrations.Migration):
    dependencies = [
        ("scheduling", "0008_audit_append_only"),
        ("portal", "0004_thesis_grants_roles_course_profile"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="PriceRule",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "slice_kind",
                    models.CharField(
                        blank=True,
                        choices=[
                            ("mig", "MIG instance"),
                            ("share", "Time-sliced share"),
                            ("whole", "Whole GPU"),
                        ],
                        max_length=10,
                    ),
                ),
                (
                    "unit",
                    models.CharField(
                        choices=[
                            ("gpu_hour", "per GPU-hour"),
                            ("cu_hour", "per compute-unit hour"),
                        ],
                        max_length=10,
                    ),
                ),
                ("price", models.DecimalField(decimal_places=4, max_digits=12)),
                ("currency", models.CharField(max_length=3)),
                ("valid_from", models.DateField()),
                ("valid_until", models.DateField(blank=True, null=True)),
                ("note", models.CharField(blank=True, max_length=300)),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                (
                    "created_by",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
                (
                    "profile",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to="scheduling.desktopprofile",
                    ),
                ),
            ],
            options={
                "ordering": ["valid_from", "pk"],
            },
        ),
        migrations.CreateModel(
            name="UsageRecord",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "run",
                    models.PositiveIntegerField(
                        default=1, help_text="1 for the session's first run."
                    ),
                ),
                ("username", models.CharField(max_length=150)),
                ("course_code", models.CharField(blank=True, max_length=40)),
                ("department", models.CharField(blank=True, max_length=100)),
                ("purpose", models.CharField(max_length=20)),
                ("profile_slug", models.CharField(max_length=60)),
                (
                    "booking_id",
                    models.PositiveIntegerField(
                        blank=True,
                        help_text="The booking it ran in; empty for elastic use.",
                        null=True,
                    ),
                ),
                (
                    "slice_kind",
                    models.CharField(blank=True, help_text="Empty: CPU only.", max_length=10),
                ),
                ("mig_profile", models.CharField(blank=True, max_length=120)),
                ("gpu_model", models.CharField(blank=True, max_length=200)),
                ("node_hostname", models.CharField(blank=True, max_length=200)),
                ("slices", models.PositiveIntegerField(default=0)),
                (
                    "gpu_share",
                    models.FloatField(
                        default=0.0,
                        help_text="GPUs held: a whole GPU 1, a slice its part (milli / 1000).",
                    ),
                ),
                ("compute_units", models.FloatField(default=0.0)),
                ("started_at", models.DateTimeField(db_index=True)),
                ("ended_at", models.DateTimeField(blank=True, db_index=True, null=True)),
                (
                    "end_state",
                    models.CharField(
                        blank=True,
                        help_text="The state the session left RUNNING for.",
                        max_length=20,
                    ),
                ),
                ("gpu_hours", models.DecimalField(decimal_places=6, default=0, max_digits=16)),
                ("cu_hours", models.DecimalField(decimal_places=6, default=0, max_digits=16)),
                ("idle_gpu_hours", models.DecimalField(decimal_places=6, default=0, max_digits=16)),
                (
                    "utilisation_pct",
                    models.FloatField(
                        blank=True,
                        help_text="The GPU reading used for idle hours; empty: none.",
                        null=True,
                    ),
                ),
                (
                    "session",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="usage_records",
                        to="scheduling.session",
                    ),
                ),
                (
                    "user",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={
                "ordering": ["started_at", "pk"],
                "constraints": [
                    models.UniqueConstraint(
                        condition=models.Q(("ended_at__isnull", True)),
                        fields=("session",),
                        name="one_open_usage_record_per_session",
                    )
                ],
            },
        ),
        migrations.RunPython(backfill, migrations.RunPython.noop),
    ]
