"""Applying the idle policy and the time-limit warnings, once a minute (beat entry
``idle-sweep``, docs/lifecycle.md), and resuming a suspended session.

The verdict is ``scheduling.rules.idle_rules.step``'s; this module reads the sessions, their
activity and policies, and acts on changes: IDLE is only recorded (and shown), WARNED tells
the person (live, and by e-mail if they chose it), SUSPENDED moves the session to
``SessionState.SUSPENDED`` through ``lifecycle.do_transition`` (the slice is released, the
node forgets it, its agent stops the container; the home volume is kept), ENDED ends a
session suspended for too long.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from ..choices import IdleState, Purpose, SessionState
from ..engine.reasons import Code, Reason
from ..events import broadcast_session
from ..idle_lookup import policy_for
from ..models import IdlePolicy, LifecycleNotices, Session, SessionActivity
from ..rules import idle_rules
from ..rules.idle_rules import Context, Idle, Track
from . import Conflict, NotFound
from .email_notices import notify
from .lifecycle import do_transition
from .mig_layout import sessions_running_cuda
from .session_activity import activity_of, forget

# Minutes before the time limit at which the person is warned.
LIMIT_WARNINGS = (15, 5)


@dataclass
class SweepResult:
    changed: int = 0  # verdicts recorded (any change)
    warned: int = 0
    suspended: int = 0
    ended: int = 0
    limit_warnings: int = 0


def in_class(session: Session, now: datetime) -> bool:
    """A booked class's session inside its booking's window (never idle)."""
    booking = session.booking
    return (
        booking is not None
        and booking.cancelled_at is None
        and booking.starts_at <= now < booking.ends_at
    )


def context_of(session: Session, now: datetime, cuda_running: bool = False) -> Context:
    return Context(
        thesis=session.purpose == Purpose.THESIS,
        in_class=in_class(session, now),
        cuda_running=cuda_running,
    )


def wants_email(user_id: int) -> bool:
    return LifecycleNotices.objects.filter(user_id=user_id, email_warnings=True).exists()


def do_idle_sweep(now: datetime | None = None) -> SweepResult:
    """One pass over running and suspended sessions (idempotent: a second pass at the same
    time changes nothing)."""
    now = now or timezone.now()
    result = SweepResult()
    rows = list(IdlePolicy.objects.all())
    sessions = list(
        Session.objects.filter(
            state__in=[SessionState.RUNNING, SessionState.SUSPENDED]
        ).select_related("profile", "booking", "user", "activity")
    )
    cuda = sessions_running_cuda([s.pk for s in sessions if s.state == SessionState.RUNNING])
    for session in sessions:
        activity = getattr(session, "activity", None)
        policy = policy_for(session, rows)
        track = Track(Idle(session.idle_state), session.idle_since)
        context = context_of(session, now, cuda_running=session.pk in cuda)
        verdict = idle_rules.step(track, activity_of(session, activity), policy, context, now)
        if verdict != track:
            _apply(session, verdict, policy, activity, result, now)
        if session.state == SessionState.RUNNING and verdict.state != Idle.SUSPENDED:
            result.limit_warnings += _limit_warning(session, activity, now)
    return result


def _apply(
    session: Session,
    verdict: Track,
    policy: idle_rules.Policy,
    activity: SessionActivity | None,
    result: SweepResult,
    now: datetime,
) -> None:
    fields: dict[str, Any] = {
        "idle_state": IdleState(verdict.state.value),
        "idle_since": verdict.since,
    }
    try:
        if verdict.state == Idle.SUSPENDED:
            quiet = idle_rules.quiet_since(
                activity_of(session, activity), policy, context_of(session, now)
            )
            do_transition(
                session.pk,
                SessionState.SUSPENDED,
                actor="scheduler",
                reason=Reason(Code.IDLE_SUSPENDED, {"since": quiet}),
                only_from=frozenset({SessionState.RUNNING}),
                **fields,
            )
            result.suspended += 1
        elif verdict.state == Idle.ENDED:
            hours = round(policy.end_after.total_seconds() / 3600, 1)
            do_transition(
                session.pk,
                SessionState.ENDED,
                actor="scheduler",
                reason=Reason(Code.IDLE_ENDED, {"hours": f"{hours:g}"}),
                only_from=frozenset({SessionState.SUSPENDED}),
                **fields,
            )
            result.ended += 1
        else:
            with transaction.atomic():
                updated = Session.objects.filter(pk=session.pk, state=session.state).update(
                    **fields
                )
                if not updated:
                    return
                broadcast_session(session.pk)
                if verdict.state == Idle.WARNED:
                    result.warned += 1
                    if wants_email(session.user_id):
                        suspend_at = now + policy.suspend_after
                        context = {"session": session, "suspend_at": suspend_at}
                        notify(session.user, "idle_warning", context)
        result.changed += 1
    except Conflict:
        return  # it moved meanwhile (stopped, preempted): the next pass sees it anew


def _limit_warning(session: Session, activity: SessionActivity | None, now: datetime) -> int:
    """Warn once at each of :data:`LIMIT_WARNINGS` minutes before the limit (only the
    nearest one reached, when the sweep comes late); 1 if a warning was given."""
    ends_at = session.ends_at
    if ends_at is None or ends_at <= now:
        return 0
    left = ends_at - now
    reached = [m for m in LIMIT_WARNINGS if left <= timedelta(minutes=m)]
    if not reached:
        return 0
    mark = min(reached)
    given = 0
    if activity is not None and activity.limit_warned_for == ends_at:
        given = activity.limit_warned
    if given and given <= mark:
        return 0
    with transaction.atomic():
        row, _created = SessionActivity.objects.get_or_create(session_id=session.pk)
        row.limit_warned, row.limit_warned_for = mark, ends_at
        row.save(update_fields=["limit_warned", "limit_warned_for"])
        broadcast_session(session.pk)
        if wants_email(session.user_id):
            step = session.profile.extend_step_minutes
            context = {"session": session, "minutes": mark, "ends_at": ends_at, "step": step}
            notify(session.user, "time_limit_warning", context)
    return 1


def do_resume(user: User, session_id: int) -> Session:
    """Requeue a suspended session with its age kept (its owner, or an admin)."""
    session = Session.objects.openable_by(user).filter(pk=session_id).first()
    if session is None:
        raise NotFound(_("No such session."))
    if session.state != SessionState.SUSPENDED:
        raise Conflict(
            _("Only a suspended session can be resumed; this one is %(state)s.")
            % {"state": session.get_state_display()}
        )
    with transaction.atomic():
        resumed = do_transition(
            session.pk,
            SessionState.QUEUED,
            actor=f"user:{user.get_username()}",
            reason=Reason(Code.RESUMED),
            only_from=frozenset({SessionState.SUSPENDED}),
            idle_state=IdleState.ACTIVE,
            idle_since=None,
            extended_minutes=0,  # a new run: the profile's time limit afresh
        )
        forget(session.pk)
    return resumed
