"""What the clock ends: preemption grace periods and time limits (run by every cycle)."""

from __future__ import annotations

from datetime import datetime

from ..choices import SessionState
from ..engine.reasons import Code, Reason
from ..models import Session
from . import Conflict
from .lifecycle import do_transition


def finish_grace_periods(now: datetime) -> int:
    """Preempted desktops whose grace ran out go back to the queue, keeping their age."""
    done = 0
    due = Session.objects.filter(state=SessionState.PREEMPTING, preempt_deadline__lte=now)
    for session_id in due.values_list("pk", flat=True):
        try:
            do_transition(
                session_id,
                SessionState.PREEMPTED,
                actor="scheduler",
                reason=Reason(Code.REQUEUED_PREEMPTED),
                only_from=frozenset({SessionState.PREEMPTING}),
            )
            done += 1
        except Conflict:
            continue
    return done


def stop_overdue(now: datetime) -> int:
    """Running desktops past their time limit (``Session.ends_at``: the profile's, plus
    extensions) are stopped."""
    stopped = 0
    for s in Session.objects.filter(
        state=SessionState.RUNNING, started_at__isnull=False
    ).select_related("profile"):
        ends_at = s.ends_at
        if ends_at is None or ends_at > now:
            continue
        minutes = s.profile.max_duration_minutes + s.extended_minutes
        try:
            do_transition(
                s.pk,
                SessionState.STOPPING,
                actor="scheduler",
                reason=Reason(Code.TIME_LIMIT, {"minutes": minutes}),
                only_from=frozenset({SessionState.RUNNING}),
            )
            stopped += 1
        except Conflict:
            continue
    return stopped
