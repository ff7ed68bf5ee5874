"""Who may ask for which purpose, and the demotion of queued requests that lost it.

Thesis is the top tier, so it needs an active thesis grant (an advisor's or an admin's);
coursework needs an active enrolment in the named course; hobby is open to everyone. The
rules are checked at submit (``sessions.check_submit``) and again at the start of every
scheduling cycle (:func:`demote_ineligible`), so nothing ineligible is ever placed.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import date, datetime
from functools import partial

from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from people.models import Course, Member, Role, ThesisGrant

from ..choices import WAITING_STATES, AuditKind, Purpose
from ..engine.reasons import Code, Reason
from ..events import broadcast_session
from ..models import Session
from ..presenters import render_reason, stored
from . import ServiceError
from .audit import record
from .email_notices import notify

SCHEDULER = "scheduler"


class Forbidden(ServiceError):
    """The person may see the thing but not do this to it (pages and the API answer 403)."""

    def __init__(self, message: str):
        super().__init__(message, code="forbidden")


def is_faculty(user: User) -> bool:
    """Faculty (``Member.role``) may grant thesis status to their students."""
    return Member.objects.filter(user=user, role=Role.FACULTY).exists()


def is_student(user: User) -> bool:
    """Students (``Member.role``, a person without a member row included; never admins) are
    the only ones thesis status is granted to."""
    if user.is_staff:
        return False
    return not Member.objects.filter(user=user).exclude(role=Role.STUDENT).exists()


def active_thesis_grant(user: User, today: date | None = None) -> ThesisGrant | None:
    """The person's thesis grant in force today (the one lasting longest), if any."""
    if not user.is_authenticated:
        return None
    grants = ThesisGrant.objects.active(today).filter(student=user)
    return grants.order_by("-until", "-pk").first()


def eligible_courses(user: User) -> QuerySet[Course]:
    """The courses the person is enrolled in (``Course.students``)."""
    if not user.is_authenticated:
        return Course.objects.none()
    return Course.objects.filter(students=user)


def eligible_purposes(user: User) -> list[Purpose]:
    """The purposes this person may ask for now, in tier order (thesis first)."""
    purposes = []
    if active_thesis_grant(user) is not None:
        purposes.append(Purpose.THESIS)
    if eligible_courses(user).exists():
        purposes.append(Purpose.COURSEWORK)
    purposes.append(Purpose.HOBBY)
    return purposes


def demote(session: Session, reason: Reason, actor: str, *, drop_course: bool = False) -> bool:
    """Turn one queued request into a hobby request, saying why (a conditional UPDATE: a
    request placed or stopped meanwhile is left alone). True when it was changed."""
    fields = {"purpose": Purpose.HOBBY, **stored(reason)}
    if drop_course:
        fields["course"] = None
    changed = Session.objects.filter(
        pk=session.pk, state__in=WAITING_STATES, purpose=session.purpose
    ).update(**fields)
    if not changed:
        return False
    record(
        AuditKind.SESSION_DEMOTED,
        actor,
        session=session.pk,
        data={"from": session.purpose, "to": Purpose.HOBBY, "reason": str(reason.code)},
    )
    broadcast_session(session.pk)
    return True


def _tell(user: User, demoted: list[tuple[Session, Reason]]) -> None:
    """One e-mail for the requests demoted together; the reasons render in the reader's
    language (the template calls them inside the person's ``translation.override``)."""
    if not demoted:
        return
    lines = [{"session": s, "reason": partial(render_reason, reason)} for s, reason in demoted]
    notify(user, "demoted", {"demoted": lines, "count": len(lines), "purpose": Purpose.HOBBY.label})


def demote_thesis_requests(student: User, actor: str, today: date | None = None) -> int:
    """Demote the student's queued thesis requests unless a grant is in force; e-mail them."""
    if active_thesis_grant(student, today) is not None:
        return 0
    reason = Reason(Code.THESIS_GRANT_ENDED)
    queued = Session.objects.filter(
        user=student, purpose=Purpose.THESIS, state__in=WAITING_STATES
    ).select_related("profile")
    demoted = [(s, reason) for s in queued if demote(s, reason, actor)]
    _tell(student, demoted)
    return len(demoted)


def close_grant(grant: ThesisGrant, actor: str, now: datetime) -> int:
    """Apply a grant's end once (``closed_at``): audit it and demote the student's queued
    thesis requests. Returns how many were demoted (0 if another grant is in force)."""
    if not ThesisGrant.objects.filter(pk=grant.pk, closed_at=None).update(closed_at=now):
        return 0
    demoted = demote_thesis_requests(grant.student, actor, timezone.localdate(now))
    record(
        AuditKind.THESIS_ENDED,
        actor,
        data={
            "grant": grant.pk,
            "student": grant.student.get_username(),
            "until": grant.until.isoformat(),
            "revoked": grant.revoked_at is not None,
            "demoted": demoted,
        },
    )
    return demoted


def ended_grants(now: datetime) -> QuerySet[ThesisGrant]:
    """Grants revoked or past their last day whose end was not applied yet."""
    today = timezone.localdate(now)
    return ThesisGrant.objects.filter(closed_at=None).filter(
        Q(revoked_at__isnull=False) | Q(until__lt=today)
    )


def demote_ineligible(now: datetime) -> int:
    """Close ended grants, then demote every queued thesis request without a grant in force
    and every queued coursework request of someone no longer in the course. Returns how
    many requests were demoted."""
    count = 0
    with transaction.atomic():
        for grant in ended_grants(now).select_related("student"):
            count += close_grant(grant, SCHEDULER, now)
        granted = ThesisGrant.objects.active(timezone.localdate(now)).values("student_id")
        thesis_users = (
            Session.objects.filter(purpose=Purpose.THESIS, state__in=WAITING_STATES)
            .exclude(user_id__in=granted)
            .values("user_id")
        )
        for student in User.objects.filter(pk__in=thesis_users):
            count += demote_thesis_requests(student, SCHEDULER, timezone.localdate(now))
        count += _demote_unenrolled()
    return count


def _demote_unenrolled() -> int:
    """Queued coursework requests whose person is neither enrolled in nor teaching the
    course (the same rule as ``check_submit``), or that name no course at all."""
    queued = list(
        Session.objects.filter(purpose=Purpose.COURSEWORK, state__in=WAITING_STATES).select_related(
            "user", "course", "profile"
        )
    )
    courses = {s.course_id for s in queued if s.course_id}
    members = set(
        Course.students.through.objects.filter(course_id__in=courses).values_list(
            "course_id", "user_id"
        )
    ) | set(
        Course.instructors.through.objects.filter(course_id__in=courses).values_list(
            "course_id", "user_id"
        )
    )
    demoted: dict[int, list[tuple[Session, Reason]]] = defaultdict(list)
    users = {}
    for session in queued:
        if (session.course_id, session.user_id) in members:
            continue
        reason = Reason(Code.ENROLMENT_ENDED, {"course": session.course_code})
        if demote(session, reason, SCHEDULER, drop_course=True):
            demoted[session.user_id].append((session, reason))
            users[session.user_id] = session.user
    for user_id, sessions in demoted.items():
        _tell(users[user_id], sessions)
    return sum(len(s) for s in demoted.values())
