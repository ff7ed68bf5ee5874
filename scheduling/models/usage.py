"""Accounting: one usage record per run of a session, and the campus's internal price list."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from ..choices import SliceKind


class UsageRecord(models.Model):
    """One run of a session: from RUNNING to the state that ended the run (a terminal state,
    or back to the queue). A requeued session gets one record per run, so its earlier runs
    keep counting. Who and what are copied as text, so a record outlives its session."""

    session = models.ForeignKey(
        "Session", null=True, blank=True, related_name="usage_records", on_delete=models.SET_NULL
    )
    run = models.PositiveIntegerField(default=1, help_text="1 for the session's first run.")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, related_name="+", on_delete=models.SET_NULL
    )
    username = models.CharField(max_length=150)
    course_code = models.CharField(max_length=40, blank=True)
    department = models.CharField(max_length=100, blank=True)
    purpose = models.CharField(max_length=20)
    profile_slug = models.CharField(max_length=60)
    booking_id = models.PositiveIntegerField(
        null=True, blank=True, help_text="The booking it ran in; empty for elastic use."
    )
    slice_kind = models.CharField(max_length=10, blank=True, help_text="Empty: CPU only.")
    mig_profile = models.CharField(max_length=120, blank=True)
    gpu_model = models.CharField(max_length=200, blank=True)
    node_hostname = models.CharField(max_length=200, blank=True)
    slices = models.PositiveIntegerField(default=0)
    gpu_share = models.FloatField(
        default=0.0, help_text="GPUs held: a whole GPU 1, a slice its part (milli / 1000)."
    )
    compute_units = models.FloatField(default=0.0)
    started_at = models.DateTimeField(db_index=True)
    ended_at = models.DateTimeField(null=True, blank=True, db_index=True)
    end_state = models.CharField(
        max_length=20, blank=True, help_text="The state the session left RUNNING for."
    )
    gpu_hours = models.DecimalField(default=0, max_digits=16, decimal_places=6)
    cu_hours = models.DecimalField(default=0, max_digits=16, decimal_places=6)
    idle_gpu_hours = models.DecimalField(default=0, max_digits=16, decimal_places=6)
    utilisation_pct = models.FloatField(
        null=True, blank=True, help_text="The GPU reading used for idle hours; empty: none."
    )
    gpu_idle_seconds = models.FloatField(
        default=0.0,
        help_text="GPU-seconds (GPUs held x seconds) the agent's usage samples found the "
        "session's GPU idle, under its idle policy's threshold (docs/lifecycle.md).",
    )

    class Meta:
        ordering = ["started_at", "pk"]
        constraints = [
            # At most one open run per session, whatever races.
            models.UniqueConstraint(
                fields=["session"],
                condition=Q(ended_at__isnull=True),
                name="one_open_usage_record_per_session",
            ),
        ]

    def __str__(self) -> str:
        return f"usage of session {self.session_id} run {self.run} ({self.username})"


class PriceUnit(models.TextChoices):
    GPU_HOUR = "gpu_hour", _("per GPU-hour")
    CU_HOUR = "cu_hour", _("per compute-unit hour")


class PriceRule(models.Model):
    """A line of the internal price list: a price for a slice kind and/or profile (blank:
    any), per GPU-hour or compute-unit hour, valid over dates (``valid_until`` inclusive,
    empty: open). A change of price is a new row; rules of one key never overlap. A line is
    ended (``valid_until`` set) or corrected in place by ``services.prices``, only in ways
    that leave every closed report's figures as they were (:class:`ClosedReport`)."""

    slice_kind = models.CharField(max_length=10, choices=SliceKind.choices, blank=True)
    profile = models.ForeignKey(
        "DesktopProfile", null=True, blank=True, related_name="+", on_delete=models.PROTECT
    )
    unit = models.CharField(max_length=10, choices=PriceUnit.choices)
    price = models.DecimalField(max_digits=12, decimal_places=4)
    currency = models.CharField(max_length=3)
    valid_from = models.DateField()
    valid_until = models.DateField(null=True, blank=True)
    note = models.CharField(max_length=300, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, related_name="+", on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["valid_from", "pk"]

    def __str__(self) -> str:
        what = f"{self.slice_kind or 'any kind'}, profile {self.profile_id or 'any'}"
        return f"{self.price} {self.currency} {self.unit} ({what}) from {self.valid_from}"


class ClosedReport(models.Model):
    """A closed report period (inclusive dates): the figures of the use that started in it
    are final. The lines that priced any of that use are recorded; they can no longer be
    corrected, and end no earlier than the period's last day (``services.prices``)."""

    period_start = models.DateField()
    period_end = models.DateField()
    lines = models.ManyToManyField(PriceRule, related_name="closed_reports", blank=True)
    closed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, related_name="+", on_delete=models.SET_NULL
    )
    closed_at = models.DateTimeField(default=timezone.now)
    note = models.CharField(max_length=300, blank=True)

    class Meta:
        ordering = ["-period_start", "-pk"]
        constraints = [
            models.CheckConstraint(
                condition=Q(period_end__gte=models.F("period_start")),
                name="closed_report_dates_in_order",
            ),
        ]

    def __str__(self) -> str:
        return f"closed report {self.period_start} to {self.period_end}"
