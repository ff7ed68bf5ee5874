"""Alert rules, the alerts they raised, and what their evaluation remembers between runs
(``scheduling.services.alerts``; the decision itself is ``scheduling.rules.alert_rules.step``)."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext_lazy as _


class Metric(models.TextChoices):
    GPU_MEMORY = "gpu_memory", _("GPU memory use (%)")
    GPU_UTILISATION = "gpu_utilisation", _("GPU compute utilisation (%)")
    GPU_TEMPERATURE = "gpu_temperature", _("GPU temperature (°C)")
    GPU_XID_ERRORS = "gpu_xid_errors", _("GPU XID errors (in the last report)")
    NODE_SILENCE = "node_silence", _("Seconds since the node's last heartbeat")
    # xgettext:no-python-format
    RACK_POWER = "rack_power", _("Rack power draw (% of its budget)")
    # xgettext:no-python-format
    POOL_USAGE = "pool_usage", _("Pool usage (% of GPU capacity)")
    QUEUE_LENGTH = "queue_length", _("Waiting requests")
    GPU_CLAIMS = "gpu_claims", _("Registrations refused for listing this node's GPUs (last hour)")
    START_FAILURES = "start_failures", _("Desktops that failed to start on the node (last hour)")
    GPU_MIG_LAYOUT = "gpu_mig_layout", _("MIG layout refused (1: refused, 0: accepted)")
    GPU_CORDONED = "gpu_cordoned", _("GPU cordoned for ill health (1: cordoned)")


class Scope(models.TextChoices):
    GPU = "gpu", _("Each GPU")
    NODE = "node", _("Each node")
    RACK = "rack", _("Each rack")
    POOL = "pool", _("The pool")


GPU_METRICS = frozenset(
    {Metric.GPU_MEMORY, Metric.GPU_UTILISATION, Metric.GPU_TEMPERATURE, Metric.GPU_XID_ERRORS,
     Metric.GPU_MIG_LAYOUT}
)  # fmt: skip
# Where each metric can be read. A GPU reading at a wider scope is its worst GPU's.
METRIC_SCOPES: dict[str, frozenset[str]] = {
    **{m: frozenset({Scope.GPU, Scope.NODE, Scope.RACK, Scope.POOL}) for m in GPU_METRICS},
    Metric.NODE_SILENCE: frozenset({Scope.NODE}),
    Metric.RACK_POWER: frozenset({Scope.RACK}),
    Metric.POOL_USAGE: frozenset({Scope.POOL}),
    Metric.QUEUE_LENGTH: frozenset({Scope.POOL}),
    Metric.GPU_CLAIMS: frozenset({Scope.NODE}),
    Metric.START_FAILURES: frozenset({Scope.NODE}),
    Metric.GPU_CORDONED: frozenset({Scope.GPU}),
}
PERCENT_METRICS = frozenset(
    {Metric.GPU_MEMORY, Metric.GPU_UTILISATION, Metric.RACK_POWER, Metric.POOL_USAGE}
)


class AlertLevel(models.TextChoices):
    WARNING = "warning", _("Warning")
    CRITICAL = "critical", _("Critical")


class AlertState(models.TextChoices):
    FIRING = "firing", _("Firing")
    ACKNOWLEDGED = "acknowledged", _("Acknowledged")
    RESOLVED = "resolved", _("Resolved")


OPEN_ALERT_STATES = (AlertState.FIRING, AlertState.ACKNOWLEDGED)


class AlertRule(models.Model):
    """A metric watched at a scope, with warning, critical and recovery levels."""

    name = models.CharField(max_length=100, unique=True)
    metric = models.CharField(max_length=30, choices=Metric.choices)
    scope = models.CharField(max_length=10, choices=Scope.choices)
    warning = models.FloatField(null=True, blank=True, help_text="Raise at or above this.")
    critical = models.FloatField(null=True, blank=True, help_text="Escalate at or above this.")
    recovery = models.FloatField(
        null=True, blank=True, help_text="Resolve below this; blank: a person resolves it."
    )
    sustained_minutes = models.PositiveIntegerField(
        default=0, help_text="Raise only after the value stayed at the level this long."
    )
    enabled = models.BooleanField(default=True)
    extra_recipients = models.JSONField(
        default=list, blank=True, help_text="E-mail addresses told besides the admins."
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["metric", "scope", "name"]

    def __str__(self) -> str:
        return self.name

    @classmethod
    def temperature_limit_c(cls, default: float) -> float:
        """The engine's limit: the lowest raise level of the enabled per-GPU temperature
        rules, else ``default`` (``PoolPolicy.temperature_limit_c``)."""
        levels = [
            r.warning if r.warning is not None else r.critical
            for r in cls.objects.filter(
                enabled=True, metric=Metric.GPU_TEMPERATURE, scope=Scope.GPU
            )
        ]
        return min((x for x in levels if x is not None), default=default)


class AlertQuerySet(models.QuerySet["Alert"]):
    def open(self) -> AlertQuerySet:
        return self.filter(state__in=OPEN_ALERT_STATES)

    def stopped_racks(self) -> frozenset[str]:
        """Racks with an open rack-power alert of an enabled rule: no new work goes there
        until the alert resolves (its load dropped below the rule's recovery level)."""
        subjects = self.open().filter(
            rule__enabled=True, rule__metric=Metric.RACK_POWER, subject__startswith="rack:"
        )
        names = subjects.values_list("subject", flat=True)
        return frozenset(s.removeprefix("rack:") for s in names)


class Alert(models.Model):
    """One alert of a rule about one subject, from raised to resolved."""

    rule = models.ForeignKey(AlertRule, related_name="alerts", on_delete=models.CASCADE)
    subject = models.CharField(max_length=200, help_text="gpu:<uuid>, node:<host>, rack:<name>")
    level = models.CharField(max_length=10, choices=AlertLevel.choices)
    state = models.CharField(max_length=15, choices=AlertState.choices, default=AlertState.FIRING)
    value = models.FloatField(null=True, blank=True, help_text="The latest value seen.")
    detail = models.CharField(
        max_length=500, blank=True, help_text="What caused it, where the rule says: a GPU's cordon."
    )
    raised_at = models.DateTimeField(default=timezone.now, db_index=True)
    escalated_at = models.DateTimeField(null=True, blank=True)
    acknowledged_at = models.DateTimeField(null=True, blank=True)
    acknowledged_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        related_name="+",
        on_delete=models.SET_NULL,
    )
    resolved_at = models.DateTimeField(null=True, blank=True)
    resolved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        related_name="+",
        on_delete=models.SET_NULL,
        help_text="Empty on a resolved alert: it recovered by itself.",
    )

    objects = AlertQuerySet.as_manager()

    class Meta:
        ordering = ["-raised_at", "-pk"]
        constraints = [
            models.UniqueConstraint(
                fields=["rule", "subject"],
                condition=Q(state__in=["firing", "acknowledged"]),
                name="one_open_alert_per_rule_subject",
            )
        ]

    def __str__(self) -> str:
        return f"{self.rule} {self.subject} {self.level} {self.state}"


class AlertTrack(models.Model):
    """What the evaluation remembers of one rule and subject (``alert_rules.Track``)."""

    rule = models.ForeignKey(AlertRule, related_name="tracks", on_delete=models.CASCADE)
    subject = models.CharField(max_length=200)
    breach_since = models.DateTimeField(null=True, blank=True)
    armed = models.BooleanField(default=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["rule", "subject"], name="one_track_per_rule_subject")
        ]

    def __str__(self) -> str:
        return f"{self.rule} {self.subject}"
