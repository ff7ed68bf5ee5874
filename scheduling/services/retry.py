"""Trying a desktop that failed to start again: the same request, submitted anew."""

from __future__ import annotations

from django.contrib.auth.models import User
from django.utils.translation import gettext as _

from ..choices import SessionState
from ..models import Session
from . import Conflict
from .sessions import SubmitRequest, check_submit, do_submit


def check_retry(user: User, session: Session) -> SubmitRequest:
    """The failed session's request (profile, purpose, course), checked as a new one is (a
    profile no node can run any more is refused, as at submit); Conflict unless it is the
    person's own FAILED session."""
    if session.user_id != user.pk or session.state != SessionState.FAILED:
        raise Conflict(
            _(
                "Only a desktop of yours that failed to start can be tried again (#%(id)s is "
                "%(state)s)."
            )
            % {"id": session.pk, "state": session.get_state_display()}
        )
    course = session.course.code if session.course_id and session.course else None
    return check_submit(user, session.profile_id, session.purpose, course)


def do_retry(user: User, session: Session) -> Session:
    """Submit the failed session's request again (counted against the person's submit rate
    limit, as any submit of theirs); the new session (QUEUED)."""
    return do_submit(user, check_retry(user, session), by_person=True)
