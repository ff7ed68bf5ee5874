"""Alert evaluation: read each rule's values, decide with ``alert_rules.step``, apply.

:func:`evaluate_alerts` runs from Celery beat (``scheduling.tasks.run_alert_evaluation``).
Per rule and subject it reads the latest value (:class:`Readings`), feeds it with what was
remembered (:class:`~scheduling.models.AlertTrack` and the open alert's level) to the pure
decision, and applies what happened: an alert raised, escalated or resolved, each in its own
transaction, audited, e-mailed to the admins and the rule's extra addresses, and broadcast to
the admins' pages after the commit. People acknowledge and resolve through
:mod:`.alert_changes`. The default rules are made on first use (:func:`ensure_default_rules`).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.core.mail import send_mail
from django.db import IntegrityError, transaction
from django.template.loader import render_to_string
from django.utils import timezone, translation

from ..choices import WAITING_STATES, AuditKind, SessionState
from ..events import broadcast_alert
from ..models import (
    Alert,
    AlertRule,
    AlertState,
    AlertTrack,
    AuditEvent,
    Gpu,
    Node,
    PoolPolicy,
    Session,
)
from ..models.alerts import GPU_METRICS, OPEN_ALERT_STATES, Metric, Scope
from ..rules.alert_rules import CRITICAL, Event, Levels, Track, step
from .audit import record
from .email_notices import notify
from .metric_groups import rack_budgets
from .mig_layout import MIG_LAYOUT_RULE, layout_alert_value, mig_utilisation
from .pool import DEFAULT_BLOCK_PERCENT, DEFAULT_WARN_PERCENT, pool_utilisation

log = logging.getLogger(__name__)

ACTOR = "alerts"
DEFAULT_RACK_POWER_W = 0.0  # a GPU that reports no draw adds nothing


def default_rules() -> list[dict[str, Any]]:
    """The rules a new pool starts with (docs/alerts.md). GPU temperature starts at the pool
    policy's temperature limit; pool usage at the default admission levels (its rule is the
    pool's one admission threshold: ``services.pool.admission``)."""
    lost = float(settings.NODE_LOST_AFTER_S)
    policy = PoolPolicy.current()
    return [
        dict(name="GPU memory", metric=Metric.GPU_MEMORY, scope=Scope.GPU,
             warning=75.0, critical=90.0, recovery=60.0),
        dict(name="GPU compute utilisation", metric=Metric.GPU_UTILISATION, scope=Scope.GPU,
             warning=95.0, critical=None, recovery=80.0, sustained_minutes=30),
        dict(name="GPU temperature", metric=Metric.GPU_TEMPERATURE, scope=Scope.GPU,
             warning=policy.temperature_limit_c, critical=None,
             recovery=policy.temperature_limit_c - 5.0),
        dict(name="GPU XID errors", metric=Metric.GPU_XID_ERRORS, scope=Scope.GPU,
             warning=1.0, critical=None, recovery=None),
        dict(name="Node lost", metric=Metric.NODE_SILENCE, scope=Scope.NODE,
             warning=lost, critical=None, recovery=float(settings.NODE_HEARTBEAT_TIMEOUT_S)),
        dict(name="Rack power", metric=Metric.RACK_POWER, scope=Scope.RACK,
             warning=90.0, critical=100.0, recovery=80.0),
        dict(name="Pool usage", metric=Metric.POOL_USAGE, scope=Scope.POOL,
             warning=DEFAULT_WARN_PERCENT, critical=DEFAULT_BLOCK_PERCENT,
             recovery=DEFAULT_WARN_PERCENT - 10.0),
        dict(name="Queue length", metric=Metric.QUEUE_LENGTH, scope=Scope.POOL,
             warning=10.0, critical=20.0, recovery=5.0),
        GPU_CLAIM_RULE,
        START_FAILURE_RULE,
        GPU_CORDON_RULE,
        MIG_LAYOUT_RULE,
    ]  # fmt: skip


# Another node listed this node's GPUs (docs/security.md): raised at the first refusal,
# resolved after an hour without one. Also added to existing pools by a migration.
GPU_CLAIM_RULE: dict[str, Any] = dict(
    name="GPU claimed by another node", metric=Metric.GPU_CLAIMS, scope=Scope.NODE,
    warning=1.0, critical=None, recovery=1.0,
)  # fmt: skip
CLAIM_WINDOW = timedelta(hours=1)
# A desktop failed to start on the node (docs/alerts.md): raised at the first failure (the
# node and the runtime's words are in the session's audit event), resolved after an hour
# without one. Also added to existing pools by a migration.
START_FAILURE_RULE: dict[str, Any] = dict(
    name="Desktop start failed", metric=Metric.START_FAILURES, scope=Scope.NODE,
    warning=1.0, critical=None, recovery=1.0,
)  # fmt: skip


# A sick GPU was cordoned (services/gpu_cordon.py): raised critical at once, naming the
# causes (Alert.detail); resolved when an admin uncordons it. Also added by a migration.
GPU_CORDON_RULE: dict[str, Any] = dict(
    name="GPU cordoned", metric=Metric.GPU_CORDONED, scope=Scope.GPU,
    warning=1.0, critical=1.0, recovery=1.0,
)  # fmt: skip


def ensure_default_rules() -> None:
    """Create the default rules when there are none at all (a new pool), or only the "Pool
    usage" one (migration 0031 makes it from an older pool's policy before any other)."""
    if AlertRule.objects.exclude(metric=Metric.POOL_USAGE).exists():
        return
    has_pool_usage = AlertRule.objects.filter(metric=Metric.POOL_USAGE).exists()
    with transaction.atomic():
        for fields in default_rules():
            if fields["metric"] == Metric.POOL_USAGE and has_pool_usage:
                continue
            AlertRule.objects.get_or_create(name=fields["name"], defaults=fields)


def levels_of(rule: AlertRule) -> Levels:
    return Levels(
        warning=rule.warning,
        critical=rule.critical,
        recovery=rule.recovery,
        sustained_s=rule.sustained_minutes * 60.0,
    )


# -- reading the values --------------------------------------------------------------------


def gpu_value(metric: str, gpu: Gpu) -> float | None:
    """One GPU's reading of a GPU metric, from ``Gpu.metrics`` as its agent reported it
    (``nodeagent.protocol.GpuMetrics``); None where the GPU does not report it."""
    m = gpu.metrics or {}
    if metric == Metric.GPU_MEMORY:
        used = m.get("memory_used_mb")
        return None if used is None or not gpu.memory_mb else 100.0 * used / gpu.memory_mb
    if metric == Metric.GPU_UTILISATION:
        if m.get("utilization_pct") is None and gpu.mig_mode:  # NVML has none on MIG
            return mig_utilisation(gpu, [s for s in gpu.slices.all() if s.present])
        return _number(m.get("utilization_pct"))
    if metric == Metric.GPU_MIG_LAYOUT:
        return layout_alert_value(gpu)
    if metric == Metric.GPU_TEMPERATURE:
        return _number(m.get("temperature_c"))
    if metric == Metric.GPU_XID_ERRORS:
        xids = m.get("xid_errors")
        return None if xids is None else float(len(xids))
    raise ValueError(metric)


def _number(value: object) -> float | None:
    return None if value is None else float(value)  # type: ignore[arg-type]


def _worst(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return max(known) if known else None


@dataclass
class Readings:
    """The pool's state at one instant, read once per evaluation for every rule."""

    now: datetime
    gpus: list[tuple[Gpu, Node]] = field(default_factory=list)
    nodes: list[Node] = field(default_factory=list)
    rack_power: dict[str, float] = field(default_factory=dict)  # % of budget
    pool_usage: float = 0.0  # %
    queue_length: float = 0.0
    gpu_claims: dict[int, int] = field(default_factory=dict)  # node id -> refusals
    start_failures: dict[int, int] = field(default_factory=dict)  # node id -> failed starts
    node_of: dict[str, int] = field(default_factory=dict)  # subject -> node id

    @classmethod
    def read(cls, now: datetime) -> Readings:
        readings = cls(now=now)
        readings.nodes = list(Node.objects.all())
        by_id = {n.pk: n for n in readings.nodes}
        readings.gpus = [
            (g, by_id[g.node_id])
            for g in Gpu.objects.filter(present=True).prefetch_related("slices").order_by("pk")
        ]
        for n in readings.nodes:
            readings.node_of[f"node:{n.hostname}"] = n.pk
        budgets = rack_budgets(n.labels or {} for n in readings.nodes)
        draw: dict[str, float] = defaultdict(float)
        for g, n in readings.gpus:
            readings.node_of[f"gpu:{g.uuid}"] = n.pk
            rack = str((n.labels or {}).get("rack", ""))
            draw[rack] += float((g.metrics or {}).get("power_w") or DEFAULT_RACK_POWER_W)
        readings.rack_power = {r: 100.0 * draw[r] / b for r, b in budgets.items() if b > 0}
        readings.pool_usage = 100.0 * pool_utilisation()
        readings.queue_length = float(Session.objects.filter(state__in=WAITING_STATES).count())
        refused = AuditEvent.objects.filter(
            kind=AuditKind.NODE_CLAIM_REFUSED, at__gte=now - CLAIM_WINDOW, node__isnull=False
        )
        for node_id in refused.values_list("node_id", flat=True):
            readings.gpu_claims[node_id] = readings.gpu_claims.get(node_id, 0) + 1
        failed = AuditEvent.objects.filter(
            kind=AuditKind.SESSION_TRANSITION,
            at__gte=now - CLAIM_WINDOW,
            node__isnull=False,
            data__to=SessionState.FAILED,
        )
        for node_id in failed.values_list("node_id", flat=True):
            readings.start_failures[node_id] = readings.start_failures.get(node_id, 0) + 1
        return readings

    def values(self, rule: AlertRule) -> dict[str, float | None]:
        """Subject -> the rule's metric for it now (None: not reported)."""
        metric, scope = rule.metric, rule.scope
        if metric in GPU_METRICS:
            groups: dict[str, list[float | None]] = defaultdict(list)
            for g, n in self.gpus:
                rack = str((n.labels or {}).get("rack", ""))
                subject = {
                    Scope.GPU: f"gpu:{g.uuid}",
                    Scope.NODE: f"node:{n.hostname}",
                    Scope.RACK: f"rack:{rack}" if rack else "",
                    Scope.POOL: "pool",
                }[Scope(scope)]
                if subject:
                    groups[subject].append(gpu_value(metric, g))
            return {s: _worst(v) for s, v in groups.items()}
        if metric == Metric.NODE_SILENCE:
            return {f"node:{n.hostname}": self._silence(n) for n in self.nodes}
        if metric == Metric.RACK_POWER:
            return {f"rack:{r}": v for r, v in self.rack_power.items()}
        if metric == Metric.POOL_USAGE:
            return {"pool": self.pool_usage}
        if metric == Metric.QUEUE_LENGTH:
            return {"pool": self.queue_length}
        if metric == Metric.GPU_CLAIMS:
            return {f"node:{n.hostname}": float(self.gpu_claims.get(n.pk, 0)) for n in self.nodes}
        if metric == Metric.GPU_CORDONED:
            return {f"gpu:{g.uuid}": 1.0 if g.cordoned else 0.0 for g, _n in self.gpus}
        if metric == Metric.START_FAILURES:
            return {
                f"node:{n.hostname}": float(self.start_failures.get(n.pk, 0)) for n in self.nodes
            }
        return {}

    def detail(self, rule: AlertRule, subject: str) -> str:
        """What an alert of the rule about the subject names as its cause: a cordoned GPU's
        causes (``Gpu.cordon_reason``); "" for the other rules."""
        if rule.metric != Metric.GPU_CORDONED:
            return ""
        return next((g.cordon_reason for g, _n in self.gpus if f"gpu:{g.uuid}" == subject), "")

    def _silence(self, node: Node) -> float | None:
        seen = node.last_heartbeat or node.registered_at
        return None if seen is None else (self.now - seen).total_seconds()


# -- evaluating -----------------------------------------------------------------------------


@dataclass
class EvaluationResult:
    raised: list[int] = field(default_factory=list)
    escalated: list[int] = field(default_factory=list)
    resolved: list[int] = field(default_factory=list)


def evaluate_alerts(now: datetime | None = None) -> EvaluationResult:
    """Evaluate every rule once (the beat task's work); returns the alerts that changed."""
    now = now or timezone.now()
    ensure_default_rules()
    readings = Readings.read(now)
    result = EvaluationResult()
    for rule in AlertRule.objects.order_by("pk"):
        if not rule.enabled:
            for alert in Alert.objects.open().filter(rule=rule):
                if _resolve(alert, None, now):
                    result.resolved.append(alert.pk)
            AlertTrack.objects.filter(rule=rule).delete()
            continue
        _evaluate_rule(rule, readings, result)
    return result


def _evaluate_rule(rule: AlertRule, readings: Readings, result: EvaluationResult) -> None:
    now = readings.now
    levels = levels_of(rule)
    values = readings.values(rule)
    tracks = {t.subject: t for t in AlertTrack.objects.filter(rule=rule)}
    open_alerts = {a.subject: a for a in Alert.objects.open().filter(rule=rule)}
    for subject, gone in open_alerts.items():
        # The GPU, node or rack is gone: nothing left to watch.
        if subject not in values and _resolve(gone, None, now):
            result.resolved.append(gone.pk)
    for subject in sorted(values):
        value = values[subject]
        row = tracks.get(subject)
        alert = open_alerts.get(subject)
        before = Track(
            level=alert.level if alert else None,
            breach_since=row.breach_since if row else None,
            armed=row.armed if row else True,
        )
        outcome = step(before, value, levels, now)
        if outcome.event == Event.RAISED:
            detail = readings.detail(rule, subject)
            raised = _raise(rule, subject, outcome.track.level or "", value, now, detail)
            if raised is not None:
                result.raised.append(raised.pk)
        elif outcome.event == Event.ESCALATED and alert is not None:
            if _escalate(alert, value, now):
                result.escalated.append(alert.pk)
        elif outcome.event == Event.RESOLVED and alert is not None:
            if _resolve(alert, value, now):
                result.resolved.append(alert.pk)
        elif alert is not None and value is not None and alert.value != value:
            Alert.objects.filter(pk=alert.pk).update(value=value)
        _remember(rule, subject, row, outcome.track)


def _remember(rule: AlertRule, subject: str, row: AlertTrack | None, track: Track) -> None:
    """Keep the track's sustained clock and arming; a track at rest has no row."""
    if track.breach_since is None and track.armed:
        if row is not None:
            row.delete()
        return
    if row is not None and (row.breach_since, row.armed) == (track.breach_since, track.armed):
        return
    AlertTrack.objects.update_or_create(
        rule=rule,
        subject=subject,
        defaults={"breach_since": track.breach_since, "armed": track.armed},
    )


def _audit(kind: str, alert: Alert, actor: str, **extra: Any) -> None:
    record(
        kind,
        actor,
        node=subject_node_id(alert.subject),
        data={
            "alert": alert.pk,
            "rule": alert.rule_id,
            "rule_name": alert.rule.name,
            "subject": alert.subject,
            "level": alert.level,
            "value": alert.value,
            **extra,
        },
    )


def subject_node_id(subject: str) -> int | None:
    """The node an alert's subject is on (a GPU's or the node itself), if any."""
    if subject.startswith("node:"):
        node = Node.objects.filter(hostname=subject.removeprefix("node:")).first()
        return node.pk if node else None
    if subject.startswith("gpu:"):
        gpu = Gpu.objects.filter(uuid=subject.removeprefix("gpu:")).first()
        return gpu.node_id if gpu else None
    return None


def _raise(
    rule: AlertRule, subject: str, level: str, value: float | None, now: datetime, detail: str = ""
) -> Alert | None:
    try:
        with transaction.atomic():
            alert = Alert.objects.create(
                rule=rule, subject=subject, level=level, value=value, raised_at=now, detail=detail
            )
            _audit(AuditKind.ALERT_RAISED, alert, ACTOR)
            send_notices(alert, "alert_raised")
            broadcast_alert(alert.pk)
    except IntegrityError:  # another evaluation raised it first: one open alert is enough
        log.info("alert for %s %s already open", rule, subject)
        return None
    return alert


def _escalate(alert: Alert, value: float | None, now: datetime) -> bool:
    with transaction.atomic():
        changed = (
            Alert.objects.filter(pk=alert.pk, state__in=OPEN_ALERT_STATES)
            .exclude(level=CRITICAL)
            .update(level=CRITICAL, escalated_at=now, state=AlertState.FIRING, value=value)
        )
        if not changed:
            return False
        alert.refresh_from_db()
        _audit(AuditKind.ALERT_ESCALATED, alert, ACTOR)
        send_notices(alert, "alert_escalated")
        broadcast_alert(alert.pk)
    return True


def _resolve(alert: Alert, value: float | None, now: datetime) -> bool:
    """Resolve an open alert by itself: it recovered (or its subject is gone)."""
    with transaction.atomic():
        fields: dict[str, Any] = {"state": AlertState.RESOLVED, "resolved_at": now}
        if value is not None:
            fields["value"] = value
        if not Alert.objects.filter(pk=alert.pk, state__in=OPEN_ALERT_STATES).update(**fields):
            return False
        alert.refresh_from_db()
        _audit(AuditKind.ALERT_RESOLVED, alert, ACTOR, by="auto")
        send_notices(alert, "alert_resolved")
        broadcast_alert(alert.pk)
    return True


# -- notices -------------------------------------------------------------------------------


def recipients(rule: AlertRule) -> tuple[list[User], list[str]]:
    """The admins with an address, and the rule's extra addresses that are not theirs."""
    staff = User.objects.filter(is_staff=True, is_active=True).exclude(email="")
    admins = list(staff.order_by("pk"))
    known = {a.email.lower() for a in admins}
    extra = [e for e in rule.extra_recipients or [] if e and e.lower() not in known]
    return admins, extra


def send_notices(alert: Alert, template: str) -> None:
    """E-mail the alert after the commit: each admin in their language and time zone, the
    extra addresses in the campus default ones."""
    admins, extra = recipients(alert.rule)
    context = {"alert": alert, "rule": alert.rule}
    for admin in admins:
        notify(admin, template, context)
    if not extra:
        return
    with translation.override(settings.LANGUAGE_CODE), timezone.override(settings.TIME_ZONE):
        subject = " ".join(render_to_string(f"email/{template}_subject.txt", context).split())
        body = render_to_string(f"email/{template}.txt", context)
    transaction.on_commit(lambda: _send(extra, subject, body))


def _send(addresses: list[str], subject: str, body: str) -> None:
    try:
        send_mail(subject, body, None, addresses)
    except Exception:  # the alert stands; the console still shows it
        log.exception("could not e-mail %s: %s", addresses, subject)
