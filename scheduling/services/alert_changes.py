"""What admins do to alerts: acknowledge, resolve, and edit the rules (``check_*`` / ``do_*``).

Each change is one conditional UPDATE (or a save) with an audit event, and the alert's new
state goes to the admins' pages after the commit. Only admins (``is_staff``) may do any of it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import AnonymousUser, User
from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from ..choices import AuditKind
from ..events import broadcast_alert
from ..models import Alert, AlertRule, AlertState, AlertTrack
from ..models.alerts import METRIC_SCOPES, OPEN_ALERT_STATES, PERCENT_METRICS, Metric, Scope
from ..rules.alert_rules import Track, resolved_by_hand
from . import Conflict, NotFound
from . import ServiceError as Invalid
from .alerts import subject_node_id
from .audit import record
from .eligibility import Forbidden

MAX_SUSTAINED_MINUTES = 7 * 24 * 60
RULE_FIELDS = (
    "name",
    "metric",
    "scope",
    "warning",
    "critical",
    "recovery",
    "sustained_minutes",
    "enabled",
    "extra_recipients",
)


def may_manage_alerts(user: User | AnonymousUser) -> bool:
    return bool(user.is_authenticated and user.is_staff)


def _admin_only(user: User | AnonymousUser) -> None:
    if not may_manage_alerts(user):
        raise Forbidden(_("Only admins manage alerts."))


def _actor(user: User) -> str:
    return f"user:{user.get_username()}"


# -- acknowledging and resolving ------------------------------------------------------------


def _open_alert(user: User, alert_id: int) -> Alert:
    _admin_only(user)
    alert = Alert.objects.select_related("rule").filter(pk=alert_id).first()
    if alert is None:
        raise NotFound(_("There is no such alert."))
    if alert.state == AlertState.RESOLVED:
        raise Conflict(_("This alert is already resolved."))
    return alert


def check_acknowledge(user: User, alert_id: int) -> Alert:
    """The firing alert this admin may acknowledge."""
    alert = _open_alert(user, alert_id)
    if alert.state == AlertState.ACKNOWLEDGED:
        raise Conflict(_("This alert is already acknowledged."))
    return alert


def do_acknowledge(user: User, alert: Alert) -> Alert:
    """Acknowledge (once): the alert stays open until it recovers or is resolved."""
    now = timezone.now()
    with transaction.atomic():
        changed = Alert.objects.filter(pk=alert.pk, state=AlertState.FIRING).update(
            state=AlertState.ACKNOWLEDGED, acknowledged_at=now, acknowledged_by=user
        )
        if not changed:
            raise Conflict(_("This alert is no longer firing."))
        alert.refresh_from_db()
        _audit(AuditKind.ALERT_ACKNOWLEDGED, alert, user)
        broadcast_alert(alert.pk)
    return alert


def check_resolve(user: User, alert_id: int) -> Alert:
    """The open alert this admin may resolve."""
    return _open_alert(user, alert_id)


def do_resolve(user: User, alert: Alert) -> Alert:
    """Resolve by hand. No new alert of its rule and subject follows until the value has come
    down below the recovery level (``alert_rules.resolved_by_hand``)."""
    now = timezone.now()
    with transaction.atomic():
        changed = Alert.objects.filter(pk=alert.pk, state__in=OPEN_ALERT_STATES).update(
            state=AlertState.RESOLVED, resolved_at=now, resolved_by=user
        )
        if not changed:
            raise Conflict(_("This alert is already resolved."))
        quiet = resolved_by_hand(Track(level=alert.level))
        AlertTrack.objects.update_or_create(
            rule_id=alert.rule_id,
            subject=alert.subject,
            defaults={"breach_since": quiet.breach_since, "armed": quiet.armed},
        )
        alert.refresh_from_db()
        _audit(AuditKind.ALERT_RESOLVED, alert, user, by="person")
        broadcast_alert(alert.pk)
    return alert


def _audit(kind: str, alert: Alert, user: User, **extra: Any) -> None:
    record(
        kind,
        _actor(user),
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


# -- editing rules --------------------------------------------------------------------------


@dataclass(frozen=True)
class RuleChange:
    rule: AlertRule | None  # None: a new rule
    fields: dict[str, Any]


def _number(data: dict[str, Any], name: str, label: str) -> float | None:
    value = data.get(name)
    if value is None or value == "":
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        raise Invalid(
            _("The %(label)s must be a number, or blank for none.") % {"label": label}, field=name
        ) from None


def check_rule(user: User, data: dict[str, Any], rule: AlertRule | None = None) -> RuleChange:
    """Validate a new rule, or changes to ``rule`` (fields not in ``data`` keep their value).
    Each refusal names its field and says what to do."""
    _admin_only(user)
    current = {f: getattr(rule, f) for f in RULE_FIELDS} if rule else {}
    merged = {**current, **{k: v for k, v in data.items() if k in RULE_FIELDS}}
    name = str(merged.get("name") or "").strip()
    if not name or len(name) > 100:
        raise Invalid(_("Give the rule a name of 1 to 100 characters."), field="name")
    clash = AlertRule.objects.filter(name=name)
    if rule is not None:
        clash = clash.exclude(pk=rule.pk)
    if clash.exists():
        raise Invalid(_("Another rule is called “%(name)s”. Pick another name.") % {"name": name},
                      field="name")  # fmt: skip
    metric = merged.get("metric")
    if metric not in Metric.values:
        raise Invalid(
            _("Pick a metric from the list: %(metrics)s.") % {"metrics": ", ".join(Metric.values)},
            field="metric",
        )
    scope = merged.get("scope")
    if scope not in METRIC_SCOPES[metric]:
        allowed = ", ".join(s for s in Scope.values if s in METRIC_SCOPES[metric])
        raise Invalid(
            _("%(metric)s can be watched per %(allowed)s only.")
            % {"metric": Metric(metric).label, "allowed": allowed},
            field="scope",
        )
    if rule is not None and rule.metric == Metric.POOL_USAGE and metric != Metric.POOL_USAGE:
        raise Invalid(
            _("This rule is the pool's admission threshold: its metric stays pool usage."),
            field="metric",
        )
    if metric == Metric.POOL_USAGE:
        others = AlertRule.objects.filter(metric=Metric.POOL_USAGE)
        if rule is not None:
            others = others.exclude(pk=rule.pk)
        if others.exists():
            raise Invalid(
                _("The pool has one pool usage rule, its admission threshold: edit that one."),
                field="metric",
            )
    warning = _number(merged, "warning", _("warning level"))
    critical = _number(merged, "critical", _("critical level"))
    recovery = _number(merged, "recovery", _("recovery level"))
    if warning is None and critical is None:
        raise Invalid(_("Set a warning level, a critical level, or both."), field="warning")
    top = 100.0 if metric in PERCENT_METRICS else None
    for name_, value in (("warning", warning), ("critical", critical), ("recovery", recovery)):
        if value is None:
            continue
        if value < 0 or (top is not None and value > top):
            raise Invalid(
                _("Levels of this metric are percentages: give a number from 0 to 100.")
                if top is not None
                else _("Levels cannot be negative."),
                field=name_,
            )
    if metric == Metric.POOL_USAGE and (warning is None or critical is None):
        raise Invalid(
            _("The pool usage rule needs both levels: new hobby requests are refused at the "
              "critical level."),
            field="warning" if warning is None else "critical",
        )  # fmt: skip
    if warning is not None and critical is not None and not warning < critical:
        raise Invalid(_("The critical level must be above the warning level."), field="critical")
    raise_at = warning if warning is not None else critical
    assert raise_at is not None
    if recovery is not None and not recovery < raise_at:
        raise Invalid(
            _("The recovery level must be below the warning level (%(level)s), so that a value "
              "hovering at the threshold raises one alert, not many.") % {"level": raise_at},
            field="recovery",
        )  # fmt: skip
    sustained = merged.get("sustained_minutes") or 0
    try:
        sustained = int(sustained)
    except (TypeError, ValueError):
        sustained = -1
    if not 0 <= sustained <= MAX_SUSTAINED_MINUTES:
        raise Invalid(
            _("“Sustained for” is a whole number of minutes from 0 to %(max)s.")
            % {"max": MAX_SUSTAINED_MINUTES},
            field="sustained_minutes",
        )
    extra = merged.get("extra_recipients") or []
    if isinstance(extra, str):
        extra = [e.strip() for e in extra.replace(";", ",").split(",") if e.strip()]
    if not isinstance(extra, list):
        raise Invalid(_("Give the extra addresses as a list."), field="extra_recipients")
    for address in extra:
        try:
            validate_email(address)
        except ValidationError:
            raise Invalid(
                _("“%(address)s” is not an e-mail address.") % {"address": address},
                field="extra_recipients",
            ) from None
    fields = dict(
        name=name,
        metric=metric,
        scope=scope,
        warning=warning,
        critical=critical,
        recovery=recovery,
        sustained_minutes=sustained,
        enabled=bool(merged.get("enabled", True)),
        extra_recipients=list(extra),
    )
    return RuleChange(rule=rule, fields=fields)


def do_save_rule(user: User, change: RuleChange) -> AlertRule:
    """Create or update the rule and audit it with before and after. Its open alerts stay as
    they are; the next evaluation applies the new levels (a disabled rule's resolve)."""
    with transaction.atomic():
        rule = change.rule or AlertRule()
        before = {f: getattr(rule, f) for f in RULE_FIELDS} if change.rule else None
        for name, value in change.fields.items():
            setattr(rule, name, value)
        rule.save()
        record(
            AuditKind.ALERT_RULE_CHANGED,
            _actor(user),
            data={"rule": rule.pk, "before": before, "after": change.fields},
        )
    return rule
