"""Extending a running desktop's time limit by its profile's step (docs/lifecycle.md).

Allowed when nobody is waiting for that kind of slice, the quotas have room for the extra
GPU-hours, and the total stays within the profile's maximum; every extension is audited, and
every refusal is a :class:`Conflict` that says why in plain words.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import F
from django.utils import timezone
from django.utils.translation import gettext as _

from ..choices import ON_NODE_STATES, WAITING_STATES, AuditKind, SessionState
from ..events import broadcast_session
from ..models import Allocation, DesktopProfile, Session
from . import Conflict, NotFound
from .audit import record
from .quota_requests import extra_gpu_hours
from .snapshot import engine_quota, quota_rows
from .usage import collect_usage, scope_keys


@dataclass(frozen=True)
class ProfileRoom:
    """How far a desktop's profile lets it be extended: one more step while its time limit
    is no later than ``last_end`` (never when None); ``refusal`` says why not."""

    last_end: datetime | None
    refusal: str


def profile_room(session: Session) -> ProfileRoom:
    """The profile's part of :func:`check_extend`, which a page can apply to each new time
    limit without asking again (the desktop page's Extend, disabled with the reason)."""
    profile = session.profile
    step = profile.extend_step_minutes
    if step <= 0:
        return ProfileRoom(None, _("Desktops of this kind cannot be given more time."))
    if session.started_at is None:
        return ProfileRoom(None, _("Only a running desktop can be given more time."))
    # ends_at = started_at + max_duration + extended: the step fits while it stays within
    # started_at + max_total.
    last_end = session.started_at + timedelta(minutes=profile.max_total_minutes - step)
    refusal = _(
        "This desktop cannot be given more time: %(step)s more minutes would take it "
        "past its profile's maximum of %(max)s minutes."
    ) % {"step": step, "max": profile.max_total_minutes}
    return ProfileRoom(last_end, refusal)


def check_extend(session: Session, now: datetime) -> int:
    """The minutes one extension adds now; Conflict saying why when it is refused."""
    if session.state != SessionState.RUNNING or session.ends_at is None:
        raise Conflict(_("Only a running desktop can be given more time."))
    room = profile_room(session)
    if room.last_end is None or session.ends_at > room.last_end:
        raise Conflict(room.refusal)
    step = session.profile.extend_step_minutes
    if someone_waiting(session):
        raise Conflict(
            _(
                "Someone is waiting for this kind of desktop, so yours cannot be given more "
                "time. Save your work before it ends."
            )
        )
    _check_quota(session, step, now)
    return step


def someone_waiting(session: Session) -> bool:
    """Is a request waiting (not held back by its own quota) for a slice of a kind this
    session holds (for a CPU-only desktop: for another CPU-only desktop)?"""
    kinds = set(
        Allocation.objects.filter(
            session_id=session.pk, released_at=None, slice__isnull=False
        ).values_list("slice__kind", flat=True)
    )
    waiting = (
        Session.objects.filter(state__in=WAITING_STATES, blocked=False)
        .exclude(pk=session.pk)
        .values_list("profile_id", flat=True)
        .distinct()
    )
    for profile in DesktopProfile.objects.filter(pk__in=list(waiting)):
        if not kinds and profile.gpu_count == 0:
            return True
        if kinds & set(profile.allowed_kinds or []):
            return True
    return False


def _check_quota(session: Session, step: int, now: datetime) -> None:
    """The weekly GPU-hours of every quota the session counts in must have room for the run
    up to its current limit plus the extension."""
    ends_at = session.ends_at
    if not session.compute_units or ends_at is None:
        return
    rows = {
        member: row
        for member, row in quota_rows(scope_keys(session)).items()
        if row.max_gpu_hours_week is not None
    }
    if not rows:
        return
    left_h = max(timedelta(0), ends_at - now).total_seconds() / 3600
    booked = session.compute_units * left_h  # until the current limit
    need = session.compute_units * step / 60
    usage = collect_usage(now, 7.0, ON_NODE_STATES, scopes=rows)
    extra = extra_gpu_hours(now)
    for (scope, key), row in rows.items():
        quota = engine_quota(row, scope, key, usage, extra)
        limit = quota.max_gpu_hours_week
        used = quota.gpu_hours_week + booked
        if limit is not None and used + need > limit:
            raise Conflict(
                _(
                    "The weekly quota of %(who)s has no room for more time: %(used)s of its "
                    "%(limit)s GPU-hours are used or already booked until this desktop's end, "
                    "and %(need)s more minutes need %(hours)s."
                )
                % {
                    "who": key,
                    "used": f"{used:.1f}",
                    "limit": f"{limit:g}",
                    "need": step,
                    "hours": f"{need:.1f}",
                }
            )


def do_extend(user: User, session_id: int) -> Session:
    """Give the person's running desktop one more step of time, audited."""
    session = (
        Session.objects.openable_by(user)
        .select_related("profile", "user", "user__member", "course")
        .filter(pk=session_id)
        .first()
    )
    if session is None:
        raise NotFound(_("No such session."))
    now = timezone.now()
    step = check_extend(session, now)
    with transaction.atomic():
        # Conditional, like a transition: two extensions at once cannot both pass the check.
        updated = Session.objects.filter(
            pk=session.pk, state=SessionState.RUNNING, extended_minutes=session.extended_minutes
        ).update(extended_minutes=F("extended_minutes") + step)
        if updated != 1:
            raise Conflict(_("This desktop changed meanwhile; please try again."))
        session.refresh_from_db()
        record(
            AuditKind.SESSION_EXTENDED,
            f"user:{user.get_username()}",
            session=session,
            node=session.node_id,
            data={
                "minutes": step,
                "extended_minutes": session.extended_minutes,
                "ends_at": session.ends_at.isoformat() if session.ends_at else None,
            },
        )
        broadcast_session(session.pk)
    return session
