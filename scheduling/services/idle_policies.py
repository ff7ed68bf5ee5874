"""The idle policy rows (``IdlePolicy``, docs/lifecycle.md): which applies to a session, and
admins' changes to them from the console and the Django admin alike: checked
(:func:`check_idle_policy`), saved or deleted, audited with before and after (kind
``policy.changed``, shaped as every pool setting's, ``catalogue_changes``).

A row with no profile covers every profile, one with no purpose every purpose; the most
specific row applies, and with none the defaults of ``idle_rules.Policy``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.db.models import F
from django.utils.translation import gettext as _

from ..choices import Purpose
from ..models import DesktopProfile, IdlePolicy
from ..rules import idle_rules
from . import ServiceError
from .catalogue_changes import _audit

DURATIONS = ("idle_after", "warn_after", "suspend_after", "end_after")
PERCENTS = ("gpu_idle_pct", "cpu_idle_pct")
POLICY_FIELDS = ("profile", "purpose", "enabled", *DURATIONS, *PERCENTS, "gpu_needs_viewer")
# The longest each wait may be: a week for the waits in minutes, 30 days suspended.
LONGEST = {
    "idle_after": timedelta(days=7),
    "warn_after": timedelta(days=7),
    "suspend_after": timedelta(days=7),
    "end_after": timedelta(days=30),
}
DEFAULTS = idle_rules.Policy()


@dataclass(frozen=True)
class IdlePolicyChange:
    """A checked idle policy row: the fields to save."""

    values: dict[str, Any]


@dataclass(frozen=True)
class PolicyShown:
    """A row (or the defaults, ``policy`` None) as the console lists it: waits in minutes,
    the end in hours."""

    policy: IdlePolicy | None
    enabled: bool
    idle_minutes: float
    warn_minutes: float
    suspend_minutes: float
    end_hours: float
    gpu_idle_pct: float
    cpu_idle_pct: float | None
    gpu_needs_viewer: bool


def shown(source: IdlePolicy | idle_rules.Policy) -> PolicyShown:
    return PolicyShown(
        policy=source if isinstance(source, IdlePolicy) else None,
        enabled=source.enabled,
        idle_minutes=source.idle_after.total_seconds() / 60,
        warn_minutes=source.warn_after.total_seconds() / 60,
        suspend_minutes=source.suspend_after.total_seconds() / 60,
        end_hours=source.end_after.total_seconds() / 3600,
        gpu_idle_pct=source.gpu_idle_pct,
        cpu_idle_pct=source.cpu_idle_pct,
        gpu_needs_viewer=source.gpu_needs_viewer,
    )


def policy_rows() -> list[PolicyShown]:
    """Every row, the general ones first (no profile, then no purpose)."""
    rows = IdlePolicy.objects.select_related("profile").order_by(
        F("profile__slug").asc(nulls_first=True), "purpose", "pk"
    )
    return [shown(row) for row in rows]


# Admins' changes


def _minutes(value: timedelta) -> str:
    return f"{value.total_seconds() / 60:g}"


def check_idle_policy(
    data: dict[str, Any], *, policy: IdlePolicy | None = None
) -> IdlePolicyChange:
    """A valid row: a known profile (or none) and purpose (or none), not already covered by
    another row; every wait above 0 and at most :data:`LONGEST`; the warning no sooner than
    the desktop is shown idle; percentages from 0 to 100 (the CPU's may be empty)."""
    profile = data.get("profile")
    if profile is not None and not isinstance(profile, DesktopProfile):
        raise ServiceError(
            _("Choose a desktop profile, or none for every profile."), field="profile"
        )
    purpose = data.get("purpose") or ""
    if purpose and purpose not in Purpose.values:
        raise ServiceError(_("Choose a purpose, or none for every purpose."), field="purpose")
    values: dict[str, Any] = {"profile": profile, "purpose": purpose}
    for name in DURATIONS:
        wait = data.get(name)
        if not isinstance(wait, timedelta) or wait <= timedelta(0):
            raise ServiceError(_("Enter a time above 0."), field=name)
        if wait > LONGEST[name]:
            raise ServiceError(
                _("Enter at most %(days)s days.") % {"days": LONGEST[name].days}, field=name
            )
        values[name] = wait
    if values["warn_after"] < values["idle_after"]:
        raise ServiceError(
            _(
                "The warning cannot come before the desktop is shown as idle: enter at least "
                "%(minutes)s minutes."
            )
            % {"minutes": _minutes(values["idle_after"])},
            field="warn_after",
        )
    for name in PERCENTS:
        pct = data.get(name)
        if pct is None and name == "cpu_idle_pct":
            values[name] = None
            continue
        if not isinstance(pct, int | float) or not 0 <= pct <= 100:
            raise ServiceError(_("Enter a percentage from 0 to 100."), field=name)
        values[name] = float(pct)
    values["enabled"] = bool(data.get("enabled"))
    values["gpu_needs_viewer"] = bool(data.get("gpu_needs_viewer"))
    others = IdlePolicy.objects.filter(profile=profile, purpose=purpose)
    if policy is not None and policy.pk is not None:
        others = others.exclude(pk=policy.pk)
    if others.exists():
        raise ServiceError(
            _("There is already a policy for this profile and purpose: edit that one instead."),
            field="purpose",
        )
    return IdlePolicyChange(values)


def policy_values(row: IdlePolicy | None) -> dict[str, Any] | None:
    """A stored row as plain values for the audit trail: the profile by its short name,
    the waits in minutes."""
    if row is None or row.pk is None:
        return None
    values: dict[str, Any] = {
        "profile": row.profile.slug if row.profile else "",
        "purpose": row.purpose,
        "enabled": row.enabled,
    }
    for name in DURATIONS:
        values[f"{name}_minutes"] = getattr(row, name).total_seconds() / 60
    for name in (*PERCENTS, "gpu_needs_viewer"):
        values[name] = getattr(row, name)
    return values


def do_save_idle_policy(
    actor: str, change: IdlePolicyChange, policy: IdlePolicy | None = None
) -> IdlePolicy:
    """Create or update a row; audited with before and after. The next sweep applies it."""
    with transaction.atomic():
        stored = (
            IdlePolicy.objects.select_related("profile").filter(pk=policy.pk).first()
            if policy is not None and policy.pk
            else None
        )
        before = policy_values(stored)
        row = policy if policy is not None else IdlePolicy()
        for name, value in change.values.items():
            setattr(row, name, value)
        row.save()
        action = "changed" if before is not None else "created"
        _audit(actor, "idlepolicy", row, before, policy_values(row), action)
    return row


def do_delete_idle_policy(actor: str, policy: IdlePolicy) -> None:
    """Delete a row: the sessions it covered fall back to a more general one, or the
    defaults; audited."""
    with transaction.atomic():
        _audit(actor, "idlepolicy", policy, policy_values(policy), None, "deleted")
        policy.delete()
