"""The admin's knobs: the pool policy and the quotas."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _


class PoolPolicy(models.Model):
    """The admin's scheduling knobs: one row (``PoolPolicy.current()``). The admission
    threshold is not here: it is the "Pool usage" alert rule (``services.pool.admission``)."""

    temperature_limit_c = models.FloatField(
        default=85.0, help_text="No new work on a GPU at or above this temperature."
    )
    protected_minutes = models.PositiveIntegerField(
        default=15, help_text="A session this young is never preempted."
    )
    grace_minutes = models.PositiveIntegerField(
        default=5, help_text="A preempted desktop keeps running this long."
    )
    aging_minutes_per_gpu_hour = models.FloatField(
        default=15.0, help_text="Fair share: this much waiting offsets one GPU-hour of usage."
    )
    usage_half_life_days = models.FloatField(
        default=7.0, help_text="Recent usage counts half after this many days."
    )
    booking_hold_hours = models.FloatField(
        default=24.0, help_text="Bookings starting within this many hours hold capacity."
    )
    # issue 36: what teachers and TAs may grant one person in extra GPU-hours over 7 days,
    # all courses together (quota_requests.check_answer; edited on the console's Quotas page).
    max_granted_gpu_hours_week = models.FloatField(
        default=100.0,
        help_text="Extra GPU-hours granted answers may give one person over 7 days, in all.",
    )
    # This portal's id, made once (``services.installation``): its agents name and label their
    # containers, volumes and networks with it, so two portals can share one Docker engine.
    installation_id = models.CharField(max_length=16, blank=True, default="", editable=False)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = "pool policy"

    def __str__(self) -> str:
        return "pool policy"

    @classmethod
    def current(cls) -> PoolPolicy:
        policy = cls.objects.order_by("pk").first()
        return policy if policy is not None else cls.objects.create()


class QuotaScope(models.TextChoices):
    USER = "user", "User"
    COURSE = "course", "Course"
    DEPARTMENT = "department", "Department"


class Quota(models.Model):
    """Limits for one user, course or department; key ``*`` is the scope's default."""

    scope = models.CharField(max_length=20, choices=QuotaScope.choices)
    key = models.CharField(
        max_length=150, help_text="Username, course code or department; * = everyone else."
    )
    max_sessions = models.PositiveIntegerField(
        null=True, blank=True, help_text="Concurrent desktops holding capacity."
    )
    max_gpu_hours_week = models.FloatField(
        null=True, blank=True, help_text="GPU-hours (compute units x hours) over 7 days."
    )
    max_slice_memory_mb = models.PositiveIntegerField(
        null=True, blank=True, help_text="Largest slice, in MB of GPU memory."
    )
    max_home_mb = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="A person's home folder, in MB (user scope only; empty: the setting "
        "DESKPOOL_HOME_QUOTA_MB).",
    )

    class Meta:
        ordering = ["scope", "key"]
        constraints = [
            models.UniqueConstraint(fields=["scope", "key"], name="one_quota_per_scope_key")
        ]

    def __str__(self) -> str:
        return f"{self.scope} quota for {self.key}"


class QuotaRequestState(models.TextChoices):
    PENDING = "pending", _("Waiting for an answer")
    GRANTED = "granted", _("Granted")
    REFUSED = "refused", _("Refused")
    WITHDRAWN = "withdrawn", _("Withdrawn")


class QuotaRequest(models.Model):
    """A student's request to a course's teachers for more GPU-hours this week. A granted
    request adds ``hours`` to the student's weekly limit for 7 days from the answer."""

    student = models.ForeignKey(
        settings.AUTH_USER_MODEL, related_name="quota_requests", on_delete=models.CASCADE
    )
    course = models.ForeignKey(
        "portal.Course", related_name="quota_requests", on_delete=models.CASCADE
    )
    hours = models.FloatField(help_text="Extra GPU-hours asked for (granted: given).")
    reason = models.TextField(max_length=2000)
    state = models.CharField(
        max_length=10, choices=QuotaRequestState.choices, default=QuotaRequestState.PENDING
    )
    created_at = models.DateTimeField(default=timezone.now)
    answered_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        related_name="+",
        on_delete=models.SET_NULL,
    )
    answered_at = models.DateTimeField(null=True, blank=True)
    answer = models.TextField(max_length=2000, blank=True)

    class Meta:
        ordering = ["-created_at", "-pk"]

    def __str__(self) -> str:
        return f"quota request {self.pk} by {self.student} for {self.course} ({self.state})"
