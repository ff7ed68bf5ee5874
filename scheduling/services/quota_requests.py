"""Requests for more GPU-hours: a student asks a course's teachers, who grant or refuse.

A granted request adds its hours to the student's weekly GPU-hour limit for 7 days from the
answer (:func:`extra_gpu_hours`, read where the quota limits are built for both the submit
check and the engine's snapshot).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from typing import cast

from django.contrib.auth.models import AnonymousUser, User
from django.db import transaction
from django.db.models import Q, QuerySet
from django.utils import timezone
from django.utils.translation import gettext as _
from guardian.shortcuts import get_objects_for_user, get_users_with_perms

from people.models import Course

from ..choices import AuditKind
from ..events import broadcast_quota_request
from ..locks import lock_person
from ..models.policy import PoolPolicy, QuotaRequest, QuotaRequestState
from . import Conflict, NotFound, ServiceError
from .audit import record
from .eligibility import Forbidden, eligible_courses
from .email_notices import notify
from .kick import schedule_soon
from .usage import WEEK

ANSWER_PERMISSION = "portal.answer_quota_requests"
MAX_HOURS = 500.0  # one request; a teacher may grant fewer
GRANT, REFUSE = "grant", "refuse"


def granted_this_week(student: User, now: datetime) -> float:
    """Extra GPU-hours granted to this person by answers of the last 7 days, all courses."""
    hours = QuotaRequest.objects.filter(
        student=student, state=QuotaRequestState.GRANTED, answered_at__gt=now - WEEK
    ).values_list("hours", flat=True)
    return float(sum(hours))


def check_week_cap(student: User, hours: float, now: datetime) -> float:
    """The pool's cap on granted hours per person per week (``PoolPolicy``): the cap, or a
    ServiceError saying how many hours may still be granted to this person this week."""
    cap = PoolPolicy.current().max_granted_gpu_hours_week
    given = granted_this_week(student, now)
    if given + hours > cap + 1e-9:
        room = max(cap - given, 0.0)
        raise ServiceError(
            _(
                "%(student)s was already granted %(given)s extra GPU-hours in the last 7 days; "
                "the pool allows %(cap)s a week, so grant at most %(room)s now, or refuse."
            )
            % {
                "student": student.get_username(),
                "given": f"{given:g}",
                "cap": f"{cap:g}",
                "room": f"{room:g}",
            },
            field="hours",
        )
    return cap


def extra_gpu_hours(now: datetime) -> dict[str, float]:
    """Granted extra GPU-hours per username, for requests answered in the last 7 days."""
    extra: dict[str, float] = defaultdict(float)
    for username, hours in QuotaRequest.objects.filter(
        state=QuotaRequestState.GRANTED, answered_at__gt=now - WEEK, answered_at__lte=now
    ).values_list("student__username", "hours"):
        extra[username] += hours
    return dict(extra)


@dataclass(frozen=True)
class AskRequest:
    course: Course
    hours: float
    reason: str


@dataclass(frozen=True)
class AnswerRequest:
    request: QuotaRequest
    grant: bool
    hours: float
    answer: str


def answerable_courses(user: User | AnonymousUser) -> QuerySet[Course]:
    """Courses whose quota requests this person answers: taught, granted
    ``portal.answer_quota_requests`` (a TA), or all for admins."""
    if not user.is_authenticated:
        return Course.objects.none()
    if user.is_staff:
        return Course.objects.all()
    granted = get_objects_for_user(
        user, ANSWER_PERMISSION, klass=Course, accept_global_perms=False
    ).values("pk")
    return Course.objects.filter(Q(instructors=user) | Q(pk__in=granted)).distinct()


def visible_quota_requests(user: User | AnonymousUser) -> QuerySet[QuotaRequest]:
    """Requests a person may read: their own and those of the courses they answer for."""
    if not user.is_authenticated:
        return QuotaRequest.objects.none()
    if user.is_staff:
        return QuotaRequest.objects.all()
    courses = answerable_courses(user).values("pk")
    return QuotaRequest.objects.filter(Q(student=user) | Q(course__in=courses))


def may_answer(user: User, course: Course) -> bool:
    return answerable_courses(user).filter(pk=course.pk).exists()


def pending_to_answer(user: User | AnonymousUser) -> QuerySet[QuotaRequest]:
    """Pending requests this person may answer: of the courses they answer for, never their
    own (nobody answers their own request)."""
    if not user.is_authenticated:
        return QuotaRequest.objects.none()
    return QuotaRequest.objects.filter(
        course__in=answerable_courses(user).values("pk"), state=QuotaRequestState.PENDING
    ).exclude(student=user)


def answerers(course: Course) -> list[User]:
    """Who is told of a new request: the course's instructors and its answering TAs."""
    granted = get_users_with_perms(
        course, only_with_perms_in=["answer_quota_requests"], with_group_users=False
    )
    tas = cast("QuerySet[User]", granted).values("pk")
    people = {u.pk: u for u in course.instructors.all()}
    people.update({u.pk: u for u in User.objects.filter(pk__in=tas)})
    return [people[pk] for pk in sorted(people)]


def _hours(value: object, field: str = "hours") -> float:
    try:
        hours = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        hours = -1.0
    if not 0 < hours <= MAX_HOURS:
        raise ServiceError(
            _("GPU-hours must be a number above 0 and at most %(max)s.") % {"max": MAX_HOURS},
            field=field,
        )
    return hours


def check_ask(user: User, course_code: str, hours: object, reason: str) -> AskRequest:
    """Validate a request for more GPU-hours; raise ServiceError naming the field at fault."""
    course = eligible_courses(user).filter(code=course_code or "").first()
    if course is None:
        raise ServiceError(
            _("Pick one of the courses you are enrolled in; their teachers answer."),
            field="course",
        )
    hours = _hours(hours)
    reason = (reason or "").strip()
    if not reason:
        raise ServiceError(
            _("Say what the extra GPU-hours are for, so your teachers can decide."),
            field="reason",
        )
    if len(reason) > 2000:
        raise ServiceError(_("Keep the reason under 2000 characters."), field="reason")
    _check_no_pending(user, course)
    return AskRequest(course=course, hours=hours, reason=reason)


def _check_no_pending(user: User, course: Course) -> None:
    pending = QuotaRequest.objects.filter(
        student=user, course=course, state=QuotaRequestState.PENDING
    )
    if pending.exists():
        raise ServiceError(
            _(
                "You already have a request waiting for an answer in %(course)s. "
                "Wait for that answer before asking again."
            )
            % {"course": course.code},
            field="course",
        )


def do_ask(user: User, ask: AskRequest) -> QuotaRequest:
    """Create the request (one pending per course: the person's row is locked while it is
    checked again), audit it, tell the student's pages and e-mail the course's answerers."""
    with transaction.atomic():
        lock_person(user.pk)
        _check_no_pending(user, ask.course)
        request = QuotaRequest.objects.create(
            student=user, course=ask.course, hours=ask.hours, reason=ask.reason
        )
        record(
            AuditKind.QUOTA_REQUESTED,
            f"user:{user.get_username()}",
            data={"request": request.pk, "course": ask.course.code, "hours": ask.hours},
        )
        broadcast_quota_request(request.pk)
        for teacher in answerers(ask.course):
            notify(teacher, "quota_requested", {"request": request})
    return request


def check_answerer(user: User, request_id: int) -> QuotaRequest:
    """The request this person may answer: 404 if it is not visible to them, 403 if it is
    their own (whatever their rights; the attempt is audited) or if they may not answer for
    its course."""
    request = (
        visible_quota_requests(user)
        .select_related("student", "course")
        .filter(pk=request_id)
        .first()
    )
    if request is None:
        raise NotFound(_("There is no such quota request."))
    if request.student_id == user.pk:
        # Recorded outside any transaction the refusal could roll back: a teacher or TA
        # trying to raise their own quota is what the audit trail is for.
        record(
            AuditKind.QUOTA_SELF_ANSWER_REFUSED,
            f"user:{user.get_username()}",
            data={"request": request.pk, "course": request.course.code, "hours": request.hours},
        )
        raise Forbidden(
            _(
                "You cannot answer your own request: another of the course's instructors, "
                "its TAs allowed to, or an admin answers it."
            )
        )
    if not may_answer(user, request.course):
        raise Forbidden(
            _("Only the course's instructors, its TAs allowed to, and admins answer requests.")
        )
    return request


def check_answer(
    user: User, request_id: int, decision: str, hours: object, answer: str = ""
) -> AnswerRequest:
    """Validate an answer: 404 if the request is not visible, 403 if it is the person's own
    or they may not answer for its course, 409 if it was answered, 400 for bad input."""
    request = check_answerer(user, request_id)
    if request.state != QuotaRequestState.PENDING:
        raise Conflict(_("This request was already answered."))
    if decision not in (GRANT, REFUSE):
        raise ServiceError(_("Choose to grant or to refuse the request."), field="decision")
    answer = (answer or "").strip()
    if len(answer) > 2000:
        raise ServiceError(_("Keep the answer under 2000 characters."), field="answer")
    given = 0.0
    if decision == GRANT:
        given = request.hours if hours in (None, "") else _hours(hours)
        if given > request.hours:
            raise ServiceError(
                _("Grant at most the %(hours)s GPU-hours asked for.")
                % {"hours": f"{request.hours:g}"},
                field="hours",
            )
        check_week_cap(request.student, given, timezone.now())
    return AnswerRequest(request=request, grant=decision == GRANT, hours=given, answer=answer)


def do_answer(user: User, answer: AnswerRequest) -> QuotaRequest:
    """Grant or refuse (once: a conditional UPDATE), audit it, tell the student live and by
    e-mail, and ask for a cycle (granted hours may unblock waiting requests)."""
    request = answer.request
    state = QuotaRequestState.GRANTED if answer.grant else QuotaRequestState.REFUSED
    fields: dict[str, object] = {
        "state": state,
        "answered_by": user,
        "answered_at": timezone.now(),
        "answer": answer.answer,
    }
    if answer.grant:
        fields["hours"] = answer.hours
    with transaction.atomic():
        cap = None
        if answer.grant:
            # Two answerers granting the same person at once: the person's row serialises
            # them, and the cap is checked again inside.
            lock_person(request.student_id)
            cap = check_week_cap(request.student, answer.hours, timezone.now())
        changed = QuotaRequest.objects.filter(
            pk=request.pk, state=QuotaRequestState.PENDING
        ).update(**fields)
        if not changed:
            raise Conflict(_("This request was already answered."))
        record(
            AuditKind.QUOTA_ANSWERED,
            f"user:{user.get_username()}",
            data={
                "request": request.pk,
                "course": request.course.code,
                "student": request.student.get_username(),
                "state": str(state),
                "asked": request.hours,
                "hours": answer.hours,
                "week_cap": cap,
            },
        )
        request.refresh_from_db()
        broadcast_quota_request(request.pk)
        expires = request.answered_at + WEEK if request.answered_at else None
        notify(request.student, "quota_answered", {"request": request, "expires": expires})
        if answer.grant:
            schedule_soon()
    return request
