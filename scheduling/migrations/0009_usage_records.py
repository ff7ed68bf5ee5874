"""Accounting: one usage record per run of a session, and the internal price list."""

import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("scheduling", "0008_audit_append_only"),
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
    ]
