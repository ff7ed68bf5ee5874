"""Submitting and stopping desktop sessions on behalf of a person."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone
from django.utils.translation import gettext as _

from people.models import Course

from .. import engine
from ..choices import (
    ON_NODE_STATES,
    PURPOSE_TIER,
    TERMINAL_STATES,
    WAITING_STATES,
    AuditKind,
    Purpose,
    SessionState,
)
from ..engine.reasons import Code, Reason
from ..events import broadcast_created
from ..excerpt import excerpt
from ..locks import lock_person
from ..models import Booking, DesktopProfile, Session
from ..presenters import refusal, stored
from . import Conflict, ServiceError
from .audit import record
from .eligibility import active_thesis_grant
from .feasibility import check_profile_can_run
from .kick import schedule_soon
from .lifecycle import do_transition
from .pool import admission_refusal
from .quota_requests import extra_gpu_hours
from .rate_limits import STOP, SUBMIT, check_session_rate
from .snapshot import engine_quota, profile_request, quota_rows
from .usage import collect_usage, department_of

MAX_OPEN_SESSIONS_PER_USER = 3


BOOKING_EARLY_MINUTES = 15  # a booked class's students may ask this long before it starts


@dataclass(frozen=True)
class SubmitRequest:
    profile: DesktopProfile
    purpose: Purpose
    course: Course | None
    booking: Booking | None = None


def check_submit(
    user: User, profile_id: int, purpose: str, course_code: str | None
) -> SubmitRequest:
    """Validate a request for a desktop; raise ServiceError naming the field at fault."""
    profile = DesktopProfile.objects.filter(pk=profile_id, active=True).first()
    if profile is None:
        raise ServiceError(
            _("No such desktop profile. Pick one from the list of profiles."), field="profile"
        )
    if purpose not in Purpose.values:
        raise ServiceError(
            _("Purpose must be one of: %(purposes)s.") % {"purposes": ", ".join(Purpose.values)},
            field="purpose",
        )
    course = None
    if course_code:
        course = Course.objects.filter(code=course_code).annotate(**enrolment(user)).first()
        if course is None:
            raise ServiceError(
                _("There is no course “%(course)s”.") % {"course": excerpt(course_code)},
                field="course",
            )
        if not (course.__dict__["as_student"] or course.__dict__["as_teacher"]):
            raise ServiceError(
                _("You are not enrolled in %(course)s.") % {"course": course.code}, field="course"
            )
    elif purpose == Purpose.COURSEWORK:
        raise ServiceError(_("Coursework requests name the course they are for."), field="course")
    if purpose == Purpose.THESIS and active_thesis_grant(user) is None:
        raise ServiceError(
            _(
                "Thesis requests need a thesis grant from your advisor, and you have none in "
                "force. Ask your advisor for one, or choose another purpose."
            ),
            field="purpose",
        )
    # The open-session limit is counted in do_submit, under the person's lock.
    booking = None
    if course is not None and purpose == Purpose.COURSEWORK:
        now = timezone.now()
        booking = (
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
    check_profile_can_run(profile)
    _check_admission(user, profile, Purpose(purpose), course)
    return SubmitRequest(profile=profile, purpose=Purpose(purpose), course=course, booking=booking)


def enrolment(user: User) -> dict[str, Exists]:
    """Annotations of a course: whether the person is one of its students, or teachers
    (read from the instance's ``__dict__``, where Django puts annotations)."""
    course = OuterRef("pk")
    return {
        "as_student": Exists(Course.students.through.objects.filter(course=course, user=user)),
        "as_teacher": Exists(Course.instructors.through.objects.filter(course=course, user=user)),
    }


def hobby_refusal() -> str:
    """Why a new hobby request would be refused now, in the reader's language ("" when it
    would not): the request form says so before anyone asks, next to its waits."""
    refused = admission_refusal(PURPOSE_TIER[Purpose.HOBBY])
    return refusal(refused) if refused else ""


def _check_admission(
    user: User, profile: DesktopProfile, purpose: Purpose, course: Course | None
) -> None:
    """Refuse what the pool's thresholds or the quotas refuse now, saying why."""
    tier = PURPOSE_TIER[purpose]
    refused = admission_refusal(tier)  # the pool's utilisation is read only for hobby
    if refused:
        raise ServiceError(refusal(refused), field="purpose")
    probe = Session(user=user, profile=profile, purpose=purpose, course=course)
    request = profile_request(
        profile,
        tier=tier,
        user=user.get_username(),
        course=course.code if course else "",
        department=department_of(probe),
    )
    rows = quota_rows(
        [
            ("user", request.user),
            ("course", request.course),
            ("department", request.department),
        ]
    )
    if not rows:
        return  # no quota covers this request: no usage to read
    now = timezone.now()
    usage = collect_usage(now, 7.0, ON_NODE_STATES, scopes=rows)
    extra = extra_gpu_hours(now)
    quotas = {
        (scope, key): engine_quota(row, scope, key, usage, extra)
        for (scope, key), row in rows.items()
    }
    blocked = engine.quota_block(request, quotas, starting=False)
    if blocked:
        raise ServiceError(refusal(blocked))


def check_open_sessions(user: User) -> None:
    """Refuse a new request when the person already has the most open sessions allowed."""
    open_sessions = Session.objects.filter(user=user).exclude(state__in=TERMINAL_STATES).count()
    if open_sessions >= MAX_OPEN_SESSIONS_PER_USER:
        raise ServiceError(
            _(
                "You already have %(count)s open sessions, the most allowed. "
                "Stop one before asking for another."
            )
            % {"count": open_sessions}
        )


def do_submit(user: User, request: SubmitRequest, *, by_person: bool = False) -> Session:
    """Create the session as QUEUED, audit it, and ask for a scheduling cycle after commit.

    The person's row is locked while the open sessions are counted again, so submissions
    sent at once cannot all pass the limit (ServiceError for the ones over it). The person's
    own request (``by_person``: the API, the pages) is counted against their rate limit
    first (RateLimited, nothing written).
    """
    if by_person:
        check_session_rate(user, SUBMIT)
    with transaction.atomic():
        lock_person(user.pk)
        check_open_sessions(user)
        session = Session.objects.create(
            user=user,
            profile=request.profile,
            purpose=request.purpose,
            course=request.course,
            booking=request.booking,
            state=SessionState.QUEUED,
            **stored(Reason(Code.SUBMITTED)),
        )
        record(
            AuditKind.SESSION_SUBMITTED,
            f"user:{user.get_username()}",
            session=session,
            data={
                "profile": request.profile.slug,
                "purpose": request.purpose,
                "booking": request.booking.pk if request.booking else None,
            },
        )
        broadcast_created(session)
        schedule_soon()
    return session


def do_stop(user: User, session: Session, *, by_person: bool = False) -> Session:
    """End a session at the user's request, whatever stage it has reached (``by_person``:
    counted against their rate limit first, as ``do_submit``)."""
    actor = f"user:{user.get_username()}"
    if by_person:
        check_session_rate(user, STOP)
    if session.state in TERMINAL_STATES:
        raise Conflict(
            _("This session has already ended (%(state)s).")
            % {"state": session.get_state_display()}
        )
    if session.state in WAITING_STATES:
        return do_transition(
            session.pk, SessionState.CANCELLED, actor=actor, reason=Reason(Code.STOPPED)
        )
    if session.state == SessionState.SUSPENDED:  # nothing runs: end it now
        return do_transition(
            session.pk, SessionState.ENDED, actor=actor, reason=Reason(Code.STOPPED)
        )
    if session.state == SessionState.PLACED:
        # No desktop was reported yet: end it now. Should the agent start one regardless,
        # its report is refused and it stops that container.
        try:
            return do_transition(
                session.pk,
                SessionState.ENDED,
                actor=actor,
                reason=Reason(Code.STOPPED),
                only_from=frozenset({SessionState.PLACED}),
            )
        except Conflict:
            session.refresh_from_db()
    if session.state == SessionState.STOPPING:
        return session
    return do_transition(
        session.pk, SessionState.STOPPING, actor=actor, reason=Reason(Code.STOPPING)
    )
