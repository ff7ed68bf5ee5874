"""What a desktop's end depends on (docs/lifecycle.md): its activity, the idle policy, and
whether its person wants the warnings by e-mail."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.db import models
from django.utils.translation import gettext_lazy as _

from ..choices import Purpose


class SessionActivity(models.Model):
    """One row per session, updated in place by ``services.session_activity``: how much input
    the node's gateway saw and when (never what), who is connected, and the recent utilisation
    samples its agent reported. Plus which time-limit warnings were given."""

    session = models.OneToOneField(
        "Session", primary_key=True, related_name="activity", on_delete=models.CASCADE
    )
    input_events = models.PositiveBigIntegerField(default=0)
    last_input_at = models.DateTimeField(null=True, blank=True)
    viewers = models.PositiveIntegerField(default=0)
    viewer_seen_at = models.DateTimeField(null=True, blank=True)
    # [[ISO 8601 time, GPU % or null, CPU % or null], ...], oldest first, trimmed to a window.
    samples = models.JSONField(default=list, blank=True)
    # The nearest "minutes before the limit" warning given (0: none), and for which limit (an
    # extension or a new run moves the limit, so its warnings are given again).
    limit_warned = models.PositiveIntegerField(default=0)
    limit_warned_for = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"activity of session {self.session_id}"


class IdlePolicy(models.Model):
    """When a quiet desktop is warned, suspended and ended, per profile and purpose (empty:
    any). The most specific row applies; with none, the defaults below."""

    profile = models.ForeignKey(
        "DesktopProfile",
        null=True,
        blank=True,
        related_name="idle_policies",
        on_delete=models.CASCADE,
        help_text=_("Empty: every profile."),
    )
    purpose = models.CharField(
        max_length=20, choices=Purpose.choices, blank=True, help_text=_("Empty: every purpose.")
    )
    enabled = models.BooleanField(
        default=True, help_text=_("Off: sessions it covers are never found idle.")
    )
    idle_after = models.DurationField(
        default=timedelta(minutes=10), help_text=_("Quiet this long: shown as idle.")
    )
    warn_after = models.DurationField(
        default=timedelta(minutes=30), help_text=_("Quiet this long: the person is warned.")
    )
    suspend_after = models.DurationField(
        default=timedelta(minutes=15), help_text=_("This long after the warning: suspended.")
    )
    end_after = models.DurationField(
        default=timedelta(hours=24), help_text=_("Suspended this long: ended.")
    )
    gpu_idle_pct = models.FloatField(
        default=5.0, help_text=_("GPU use below this (percent of its slice) counts as quiet.")
    )
    cpu_idle_pct = models.FloatField(
        null=True,
        blank=True,
        default=50.0,
        help_text=_("CPU use below this (percent of its limit) counts as quiet; empty: ignored."),
    )
    gpu_needs_viewer = models.BooleanField(
        default=False,
        help_text=_(
            "A busy GPU keeps the desktop only while someone is connected (thesis sessions "
            "are kept regardless)."
        ),
    )

    class Meta:
        verbose_name_plural = "idle policies"
        constraints = [
            models.UniqueConstraint(
                fields=["profile", "purpose"], name="one_idle_policy_per_profile_purpose"
            )
        ]

    def __str__(self) -> str:
        profile = self.profile.slug if self.profile else "*"
        return f"idle policy {profile}/{self.purpose or '*'}"


class LifecycleNotices(models.Model):
    """A person's choice of e-mails about their desktops' ends (the pages always warn)."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, related_name="lifecycle_notices", on_delete=models.CASCADE
    )
    email_warnings = models.BooleanField(
        default=False, help_text=_("E-mail the time-limit and idle warnings too.")
    )
    email_ready = models.BooleanField(
        default=False, help_text=_("E-mail when a desktop is ready (running).")
    )
    email_preempting = models.BooleanField(
        default=False, help_text=_("E-mail when a desktop is about to be preempted.")
    )

    class Meta:
        verbose_name_plural = "lifecycle notices"

    def __str__(self) -> str:
        return f"lifecycle notices of {self.user}"
