"""The live class: every open desktop of a course, and a teacher's Start all / Stop all.

Who may call these (instructors, admins, TAs with ``manage_class_desktops``) is decided by
the portal (``scheduling.services.teaching.course_role``) before it calls them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from people.models import Course

from ..choices import TERMINAL_STATES, WAITING_STATES, AuditKind, Purpose, SessionState
from ..engine.reasons import Code, Reason
from ..events import broadcast_session, payload_reads
from ..locks import lock_person
from ..models import Booking, DesktopProfile, Session, default_profile_of
from ..presenters import stored
from . import Conflict, NotFound, ServiceError
from .audit import record
from .kick import schedule_soon
from .lifecycle import do_transition
from .sessions import BOOKING_EARLY_MINUTES, MAX_OPEN_SESSIONS_PER_USER


@dataclass(frozen=True)
class StartAllResult:
    """What Start all did: desktops asked for, and the students passed over and why."""

    started: int
    already_open: int  # had an open session for this course
    skipped_at_limit: int  # had the most open sessions allowed
    session_ids: list[int] = field(default_factory=list)


def class_sessions(course: Course):
    """The course's open sessions (waiting or running), by student, for the live class."""
    sessions = Session.objects.filter(course=course).exclude(state__in=TERMINAL_STATES)
    return payload_reads(sessions).order_by("user__username", "created_at")


def _teacher_name(actor: User) -> str:
    return actor.get_full_name() or actor.get_username()


def check_start_all(course: Course) -> DesktopProfile:
    """The desktop Start all asks for: the course's default profile, which must be set."""
    profile = default_profile_of(course)
    if profile is None or not profile.active:
        raise ServiceError(
            _("Choose the course's default desktop in its settings first; Start all uses it."),
            field="default_profile",
        )
    return profile


def _booking_now(course: Course, profile: DesktopProfile) -> Booking | None:
    now = timezone.now()
    return (
        Booking.objects.filter(
            course=course,
            profile=profile,
            cancelled_at=None,
            starts_at__lte=now + timedelta(minutes=BOOKING_EARLY_MINUTES),
            ends_at__gt=now,
        )
        .order_by("starts_at")
        .first()
    )


def do_start_all(actor: User, course: Course) -> StartAllResult:
    """Ask for a coursework desktop for every enrolled student without an open session for
    this course; students at their open-session limit are skipped and counted."""
    profile = check_start_all(course)
    booking = _booking_now(course, profile)
    reason = stored(Reason(Code.CLASS_STARTED_BY, {"by": _teacher_name(actor)}))
    started: list[int] = []
    already = at_limit = 0
    with transaction.atomic():
        for student in course.students.order_by("pk"):
            lock_person(student.pk)  # the same lock do_submit counts under, in pk order
            open_sessions = Session.objects.filter(user=student).exclude(state__in=TERMINAL_STATES)
            if open_sessions.filter(course=course).exists():
                already += 1
                continue
            if open_sessions.count() >= MAX_OPEN_SESSIONS_PER_USER:
                at_limit += 1
                continue
            session = Session.objects.create(
                user=student,
                profile=profile,
                purpose=Purpose.COURSEWORK,
                course=course,
                booking=booking,
                state=SessionState.QUEUED,
                **reason,
            )
            record(
                AuditKind.SESSION_SUBMITTED,
                f"user:{actor.get_username()}",
                session=session,
                data={
                    "profile": profile.slug,
                    "purpose": Purpose.COURSEWORK,
                    "booking": booking.pk if booking else None,
                    "for": student.get_username(),
                },
            )
            broadcast_session(session.pk)
            started.append(session.pk)
        result = StartAllResult(len(started), already, at_limit, started)
        record(
            AuditKind.CLASS_STARTED,
            f"user:{actor.get_username()}",
            data={
                "course": course.code,
                "profile": profile.slug,
                "booking": booking.pk if booking else None,
                "started": result.started,
                "already_open": result.already_open,
                "skipped_at_limit": result.skipped_at_limit,
            },
        )
        if started:
            schedule_soon()
    return result


def _stop(actor: User, session: Session) -> bool:
    """End one class session as ``do_stop`` does, saying a teacher stopped it. False when it
    had already ended (or is stopping) by the time we got to it."""
    who = f"user:{actor.get_username()}"
    reason = Reason(Code.CLASS_STOPPED_BY, {"by": _teacher_name(actor)})
    try:
        if session.state in WAITING_STATES:
            do_transition(session.pk, SessionState.CANCELLED, actor=who, reason=reason)
            return True
        if session.state == SessionState.PLACED:
            try:
                do_transition(
                    session.pk,
                    SessionState.ENDED,
                    actor=who,
                    reason=reason,
                    only_from=frozenset({SessionState.PLACED}),
                )
                return True
            except Conflict:
                session.refresh_from_db()
        if session.state in TERMINAL_STATES or session.state == SessionState.STOPPING:
            return False
        do_transition(session.pk, SessionState.STOPPING, actor=who, reason=reason)
        return True
    except Conflict:
        return False  # it moved on its own meanwhile (ended, failed): nothing left to stop


def do_stop_all(actor: User, course: Course) -> int:
    """Stop every open session of the course; how many were stopped."""
    stopped = 0
    with transaction.atomic():
        for session in list(class_sessions(course)):
            stopped += _stop(actor, session)
        record(
            AuditKind.CLASS_STOPPED,
            f"user:{actor.get_username()}",
            data={"course": course.code, "stopped": stopped},
        )
    return stopped


def do_stop_class_session(actor: User, course: Course, session_id: int) -> Session:
    """Stop one student's desktop from the live class."""
    session = class_sessions(course).filter(pk=session_id).first()
    if session is None:
        raise NotFound(_("This desktop is not open in this course any more."))
    with transaction.atomic():
        if _stop(actor, session):
            record(
                AuditKind.CLASS_STOPPED,
                f"user:{actor.get_username()}",
                data={"course": course.code, "stopped": 1, "session": session.pk},
            )
    session.refresh_from_db()
    return session
