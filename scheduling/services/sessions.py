"""Submitting and stopping desktop sessions on behalf of a person."""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction

from portal.models import Course

from ..choices import TERMINAL_STATES, WAITING_STATES, AuditKind, Purpose, SessionState
from ..models import AuditEvent, DesktopProfile, Session
from . import Conflict, ServiceError
from .lifecycle import do_transition

MAX_OPEN_SESSIONS_PER_USER = 3


@dataclass(frozen=True)
class SubmitRequest:
    profile: DesktopProfile
    purpose: Purpose
    course: Course | None


def check_submit(
    user: AbstractBaseUser, profile_id: int, purpose: str, course_code: str | None
) -> SubmitRequest:
    """Validate a request for a desktop; raise ServiceError naming the field at fault."""
    profile = DesktopProfile.objects.filter(pk=profile_id, active=True).first()
    if profile is None:
        raise ServiceError(
            "No such desktop profile. Pick one from the list of profiles.", field="profile"
        )
    if purpose not in Purpose.values:
        raise ServiceError(f"Purpose must be one of: {', '.join(Purpose.values)}.", field="purpose")
    course = None
    if course_code:
        course = Course.objects.filter(code=course_code).first()
        if course is None:
            raise ServiceError(f"There is no course {course_code!r}.", field="course")
        if not (
            course.students.filter(pk=user.pk).exists()
            or course.instructors.filter(pk=user.pk).exists()
        ):
            raise ServiceError(f"You are not enrolled in {course.code}.", field="course")
    elif purpose == Purpose.COURSEWORK:
        raise ServiceError("Coursework requests name the course they are for.", field="course")
    open_sessions = Session.objects.filter(user=user).exclude(state__in=TERMINAL_STATES).count()
    if open_sessions >= MAX_OPEN_SESSIONS_PER_USER:
        raise ServiceError(
            f"You already have {open_sessions} open sessions, the most allowed. "
            "Stop one before asking for another."
        )
    return SubmitRequest(profile=profile, purpose=Purpose(purpose), course=course)


def do_submit(user: AbstractBaseUser, request: SubmitRequest) -> Session:
    """Create the session as QUEUED, audit it, and ask for a scheduling cycle after commit."""
    from portal.events import broadcast_session

    from ..tasks import schedule_soon

    with transaction.atomic():
        session = Session.objects.create(
            user=user,
            profile=request.profile,
            purpose=request.purpose,
            course=request.course,
            state=SessionState.QUEUED,
            reason="waiting for the scheduler",
        )
        AuditEvent.objects.create(
            kind=AuditKind.SESSION_SUBMITTED,
            actor=f"user:{user.get_username()}",
            session=session,
            data={"profile": request.profile.slug, "purpose": request.purpose},
        )
        session_id = session.pk
        transaction.on_commit(lambda: broadcast_session(session_id))
        schedule_soon()
    return session


def do_stop(user: AbstractBaseUser, session: Session) -> Session:
    """End a session at the user's request, whatever stage it has reached."""
    actor = f"user:{user.get_username()}"
    if session.state in TERMINAL_STATES:
        raise Conflict(f"This session has already {session.state.lower()}.")
    if session.state in WAITING_STATES:
        return do_transition(session.pk, SessionState.CANCELLED, actor=actor, reason="stopped")
    if session.state == SessionState.PLACED:
        # No desktop was reported yet: end it now. Should the agent start one regardless,
        # its report is refused and it stops that container.
        try:
            return do_transition(
                session.pk,
                SessionState.ENDED,
                actor=actor,
                reason="stopped",
                only_from=frozenset({SessionState.PLACED}),
            )
        except Conflict:
            session.refresh_from_db()
    if session.state == SessionState.STOPPING:
        return session
    return do_transition(session.pk, SessionState.STOPPING, actor=actor, reason="stopping")
