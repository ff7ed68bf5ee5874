"""Admins' changes to the quotas and the desktop profile catalogue, from the console and the
Django admin alike: checked (``check_quota``, ``check_profile``), saved, audited with before
and after (kind ``policy.changed``, as every pool setting), and a cycle asked for."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import User
from django.db import models, transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from people.models import Course

from ..choices import ON_NODE_STATES, AuditKind, SliceKind
from ..locks import lock_policy
from ..models import DesktopProfile, Quota
from ..models.policy import PoolPolicy, QuotaScope
from . import ServiceError
from .audit import record
from .kick import schedule_soon
from .quota_requests import extra_gpu_hours
from .snapshot import engine_quota
from .usage import collect_usage

QUOTA_LIMITS = ("max_sessions", "max_gpu_hours_week", "max_slice_memory_mb", "max_home_mb")
QUOTA_FIELDS = ("scope", "key", *QUOTA_LIMITS)
PROFILE_FIELDS = (
    "slug",
    "name",
    "description",
    "image",
    "cpus",
    "memory_mb",
    "pids_limit",
    "shm_mb",
    "gpu_count",
    "gpu_memory_min_mb",
    "compute_min",
    "gpu_models",
    "allowed_kinds",
    "max_duration_minutes",
    "extend_step_minutes",  # docs/lifecycle.md
    "max_total_minutes",
    "active",
)
# docs/lifecycle.md: the extension step and the maximum, when a form leaves them empty.
LIFECYCLE_DEFAULTS = {"extend_step_minutes": 60, "max_total_minutes": 480}


@dataclass(frozen=True)
class QuotaChange:
    """A checked quota row: scope, key and the limits (None: no limit)."""

    values: dict[str, Any]


@dataclass(frozen=True)
class ProfileChange:
    """A checked desktop profile: the fields to save."""

    values: dict[str, Any]


@dataclass(frozen=True)
class QuotaUse:
    """A quota row with what is in use now (None for a ``*`` default: counted per member)."""

    quota: Quota
    sessions: int | None = None
    gpu_hours_week: float | None = None
    max_gpu_hours_week: float | None = None  # a user's limit with granted extra hours


def _values(obj: models.Model | None, names: tuple[str, ...]) -> dict[str, Any] | None:
    if obj is None or obj.pk is None:
        return None
    return {name: getattr(obj, name) for name in names}


def _audit(actor: str, model: str, obj: models.Model, before: Any, after: Any, action: str) -> None:
    """One ``policy.changed`` event, shaped as ``admin_changes.do_save_audited`` writes
    them (``changed``: the fields that changed, as text) plus ``before`` and ``after``."""
    old, new = before or {}, after or {}
    changed = {name: str(new.get(name)) for name in new if old.get(name) != new.get(name)}
    record(
        AuditKind.POLICY_CHANGED,
        actor,
        data={
            "model": model,
            "object": str(obj),
            "id": obj.pk,
            "action": action,
            "changed": changed,
            "before": before,
            "after": after,
        },
    )


# The weekly cap on granted extra GPU-hours (quota_requests.check_week_cap)

MAX_GRANT_CAP = 10_000.0


def check_grant_cap(hours: float | None) -> float:
    """A cap of 0 (no grants at all) up to MAX_GRANT_CAP extra GPU-hours a person a week."""
    if hours is None or not 0 <= hours <= MAX_GRANT_CAP:
        raise ServiceError(
            _("Enter a number of GPU-hours from 0 to %(max)s.") % {"max": f"{MAX_GRANT_CAP:g}"},
            field="max_granted_gpu_hours_week",
        )
    return float(hours)


def do_save_grant_cap(actor: str, hours: float) -> PoolPolicy:
    """Set the pool's cap; audited (``policy.changed`` with before and after)."""
    with transaction.atomic():
        policy = lock_policy()
        before = {"max_granted_gpu_hours_week": policy.max_granted_gpu_hours_week}
        policy.max_granted_gpu_hours_week = hours
        policy.save(update_fields=["max_granted_gpu_hours_week", "updated_at"])
        after = {"max_granted_gpu_hours_week": hours}
        _audit(actor, "poolpolicy", policy, before, after, "changed")
    return policy


# Quotas


def _non_negative(data: dict[str, Any], name: str) -> float | int | None:
    value = data.get(name)
    if value is None or value == "":
        return None
    if value < 0:
        raise ServiceError(
            _("Enter 0 or more, or leave it empty for no limit."),
            field=name,
        )
    return value


def check_quota(data: dict[str, Any], *, quota: Quota | None = None) -> QuotaChange:
    """A valid quota row: a known scope; a key that is ``*`` or an existing username or
    course code (any department name); limits of 0 or more; no other row for the key."""
    scope = data.get("scope") or ""
    if scope not in QuotaScope.values:
        raise ServiceError(_("Pick user, course or department."), field="scope")
    key = str(data.get("key") or "").strip()
    if not key:
        raise ServiceError(_("Say who the quota is for, or * for everyone else."), field="key")
    if key != "*" and scope == QuotaScope.USER and not User.objects.filter(username=key).exists():
        raise ServiceError(
            _("No user is called %(key)s. Check the username, or use * for everyone else.")
            % {"key": key},
            field="key",
        )
    if key != "*" and scope == QuotaScope.COURSE and not Course.objects.filter(code=key).exists():
        raise ServiceError(
            _("No course has the code %(key)s. Check the code, or use * for every course.")
            % {"key": key},
            field="key",
        )
    limits = {name: _non_negative(data, name) for name in QUOTA_LIMITS}
    if limits["max_home_mb"] is not None and scope != QuotaScope.USER:
        raise ServiceError(
            _("A home folder is a person's: set its size on a user quota (* for everyone)."),
            field="max_home_mb",
        )
    others = Quota.objects.filter(scope=scope, key=key)
    if quota is not None and quota.pk is not None:
        others = others.exclude(pk=quota.pk)
    if others.exists():
        raise ServiceError(
            _("There is already a %(scope)s quota for %(key)s: edit that one instead.")
            % {"scope": scope, "key": key},
            field="key",
        )
    return QuotaChange({"scope": scope, "key": key, **limits})


def do_save_quota(actor: str, change: QuotaChange, quota: Quota | None = None) -> Quota:
    """Create or update a quota row; audited with before and after; a cycle follows."""
    with transaction.atomic():
        stored = Quota.objects.filter(pk=quota.pk).first() if quota and quota.pk else None
        before = _values(stored, QUOTA_FIELDS)
        row = quota if quota is not None else Quota()
        for name, value in change.values.items():
            setattr(row, name, value)
        row.save()
        action = "changed" if before is not None else "created"
        _audit(actor, "quota", row, before, _values(row, QUOTA_FIELDS), action)
        schedule_soon()
    return row


def do_delete_quota(actor: str, quota: Quota) -> None:
    """Delete a quota row (its members fall back to ``*``, or no limit); audited."""
    with transaction.atomic():
        before = _values(quota, QUOTA_FIELDS)
        _audit(actor, "quota", quota, before, None, "deleted")
        quota.delete()
        schedule_soon()


def quotas_with_use() -> list[QuotaUse]:
    """Every quota row with its member's use now, counted as the scheduler counts it
    (``usage.collect_usage`` over 7 days, ``snapshot.engine_quota``)."""
    now = timezone.now()
    usage = collect_usage(now, 7.0, ON_NODE_STATES)
    extra = extra_gpu_hours(now)
    rows = []
    for quota in Quota.objects.all():
        if quota.key == "*":
            rows.append(QuotaUse(quota))
            continue
        counted = engine_quota(quota, quota.scope, quota.key, usage, extra)
        rows.append(
            QuotaUse(
                quota,
                sessions=counted.sessions,
                gpu_hours_week=round(counted.gpu_hours_week, 2),
                max_gpu_hours_week=counted.max_gpu_hours_week,
            )
        )
    return rows


# Desktop profiles


def _positive(values: dict[str, Any], name: str, message: str) -> None:
    if name in values and (values[name] is None or values[name] <= 0):
        raise ServiceError(message, field=name)


def check_profile(data: dict[str, Any], *, profile: DesktopProfile | None = None) -> ProfileChange:
    """A valid desktop profile: a unique short name, an image, CPUs and memory above 0,
    slice kinds among ``SliceKind``; 0 GPUs means CPU-only: no slice kind, no GPU memory;
    1 GPU or more needs at least one slice kind."""
    values = {name: data[name] for name in PROFILE_FIELDS if name in data}
    slug = str(values.get("slug") or "").strip()
    if not slug:
        raise ServiceError(_("Give a short name: letters, digits and dashes."), field="slug")
    same = DesktopProfile.objects.filter(slug=slug)
    if profile is not None and profile.pk is not None:
        same = same.exclude(pk=profile.pk)
    if same.exists():
        raise ServiceError(
            _("Another profile already has the short name %(slug)s.") % {"slug": slug},
            field="slug",
        )
    if not str(values.get("name") or "").strip():
        raise ServiceError(_("Give the profile a name people will recognise."), field="name")
    if not str(values.get("image") or "").strip():
        raise ServiceError(
            _("Name the container image, such as registry.example.edu/desktops/painting:1.4."),
            field="image",
        )
    values["image"] = str(values["image"]).strip()
    _positive(values, "cpus", _("Give the desktop more than 0 CPUs (0.5 is half a CPU)."))
    _positive(values, "memory_mb", _("Give the desktop more than 0 MB of memory."))
    _positive(values, "max_duration_minutes", _("A session must be allowed at least 1 minute."))
    for name, default in LIFECYCLE_DEFAULTS.items():
        if name in values and values[name] is None:  # left empty: the default
            values[name] = default
    most = values.get("max_total_minutes")
    if most is not None and most < (values.get("max_duration_minutes") or 0):
        raise ServiceError(
            _("The maximum with extensions cannot be shorter than the time limit."),
            field="max_total_minutes",
        )
    gpus = values.get("gpu_count") or 0
    if gpus < 0:
        raise ServiceError(_("Enter 0 GPUs (CPU-only) or more."), field="gpu_count")
    if (values.get("gpu_memory_min_mb") or 0) < 0:
        raise ServiceError(_("Enter 0 MB or more."), field="gpu_memory_min_mb")
    kinds = list(values.get("allowed_kinds") or [])
    unknown = [k for k in kinds if k not in SliceKind.values]
    if unknown:
        raise ServiceError(
            _("Unknown slice kinds: %(kinds)s. Use mig, share or whole.")
            % {"kinds": ", ".join(map(str, unknown))},
            field="allowed_kinds",
        )
    if gpus == 0 and kinds:
        raise ServiceError(
            _("A CPU-only profile (0 GPUs) takes no slice: clear the slice kinds."),
            field="allowed_kinds",
        )
    if gpus == 0 and values.get("gpu_memory_min_mb"):
        raise ServiceError(
            _("A CPU-only profile (0 GPUs) needs no GPU memory: set it to 0."),
            field="gpu_memory_min_mb",
        )
    if gpus > 0 and not kinds:
        raise ServiceError(
            _("Pick at least one slice kind for a profile with GPUs, or set GPUs to 0."),
            field="allowed_kinds",
        )
    values["allowed_kinds"] = kinds
    values["gpu_models"] = list(values.get("gpu_models") or [])
    values["slug"] = slug
    return ProfileChange(values)


def do_save_profile(
    actor: str, change: ProfileChange, profile: DesktopProfile | None = None
) -> DesktopProfile:
    """Create or update a desktop profile; audited with before and after."""
    with transaction.atomic():
        stored = (
            DesktopProfile.objects.filter(pk=profile.pk).first()
            if profile is not None and profile.pk
            else None
        )
        before = _values(stored, PROFILE_FIELDS)
        row = profile if profile is not None else DesktopProfile()
        for name, value in change.values.items():
            setattr(row, name, value)
        row.save()
        action = "changed" if before is not None else "created"
        _audit(actor, "desktopprofile", row, before, _values(row, PROFILE_FIELDS), action)
        schedule_soon()
    return row


def do_deactivate_profile(actor: str, profile: DesktopProfile) -> DesktopProfile:
    """Stop offering a profile (its sessions and bookings keep it): never deleted here."""
    with transaction.atomic():
        moved = DesktopProfile.objects.filter(pk=profile.pk, active=True).update(active=False)
        if moved:
            _audit(
                actor,
                "desktopprofile",
                profile,
                {"active": True},
                {"active": False},
                "deactivated",
            )
            schedule_soon()
    profile.active = False
    return profile


def do_delete_profile(actor: str, profile: DesktopProfile) -> None:
    """Delete a profile nobody used (the Django admin's delete): audited. A profile with
    sessions or bookings is protected by the database; stop offering it instead."""
    with transaction.atomic():
        _audit(actor, "desktopprofile", profile, _values(profile, PROFILE_FIELDS), None, "deleted")
        profile.delete()  # ProtectedError (and no event) if it is in use
