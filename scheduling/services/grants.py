"""Thesis grants: an advisor (faculty) or an admin grants a student thesis status until a
date; the grantor or an admin may revoke it. Its end (revoked, or past ``until``) demotes the
student's queued thesis requests (``eligibility.close_grant``)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date

from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from people.models import ThesisGrant

from ..choices import AuditKind
from ..excerpt import excerpt
from . import Conflict, NotFound, ServiceError
from .audit import record
from .eligibility import Forbidden, close_grant, is_faculty, is_student


@dataclass(frozen=True)
class GrantRequest:
    student: User
    until: date
    note: str


def may_grant(user: User) -> bool:
    """Faculty and admins grant thesis status."""
    return user.is_authenticated and (user.is_staff or is_faculty(user))


def may_revoke(user: User, grant: ThesisGrant) -> bool:
    """The grantor and admins revoke a grant."""
    return user.is_authenticated and (user.is_staff or grant.granted_by_id == user.pk)


def check_grant(
    user: User, student_username: str, until: date | None, note: str = ""
) -> GrantRequest:
    """Validate a grant of thesis status; raise ServiceError naming the field at fault."""
    if not may_grant(user):
        raise Forbidden(_("Only faculty members and admins grant thesis status."))
    student = User.objects.filter(username=(student_username or "").strip()).first()
    if student is None:
        raise ServiceError(
            _("There is no student with the username “%(username)s”. Check the spelling.")
            % {"username": excerpt(student_username)},
            field="student",
        )
    if student.pk == user.pk:
        raise ServiceError(_("You cannot grant thesis status to yourself."), field="student")
    if not is_student(student):
        raise ServiceError(
            _(
                "“%(username)s” is not a student: thesis status is granted to students only. "
                "Check the username."
            )
            % {"username": excerpt(student.get_username())},
            field="student",
        )
    today = timezone.localdate()
    if until is None or until < today:
        raise ServiceError(
            _("The last day must be today or later (%(today)s).") % {"today": today.isoformat()},
            field="until",
        )
    if len(note) > 300:
        raise ServiceError(_("Keep the note under 300 characters."), field="note")
    return GrantRequest(student=student, until=until, note=note.strip())


def do_grant(user: User, request: GrantRequest) -> ThesisGrant:
    """Create the grant and audit it."""
    with transaction.atomic():
        grant = ThesisGrant.objects.create(
            student=request.student, granted_by=user, until=request.until, note=request.note
        )
        record(
            AuditKind.THESIS_GRANTED,
            f"user:{user.get_username()}",
            data={
                "grant": grant.pk,
                "student": request.student.get_username(),
                "until": request.until.isoformat(),
            },
        )
    return grant


def check_revoke(user: User, grant_id: int) -> ThesisGrant:
    """The grant this person may revoke: 404 if they cannot see it, 403 if not theirs."""
    grant = (
        ThesisGrant.objects.visible_to(user).select_related("student").filter(pk=grant_id).first()
    )
    if grant is None:
        raise NotFound(_("There is no such thesis grant."))
    if not may_revoke(user, grant):
        raise Forbidden(_("Only the advisor who gave a grant, or an admin, may revoke it."))
    if grant.revoked_at is not None:
        raise Conflict(_("This grant was already revoked."))
    return grant


def do_revoke(user: User, grant: ThesisGrant) -> ThesisGrant:
    """Revoke the grant (once), audit it, and apply its end to the student's queued requests."""
    now = timezone.now()
    actor = f"user:{user.get_username()}"
    with transaction.atomic():
        changed = ThesisGrant.objects.filter(pk=grant.pk, revoked_at=None).update(
            revoked_at=now, revoked_by=user
        )
        if not changed:
            raise Conflict(_("This grant was already revoked."))
        record(
            AuditKind.THESIS_REVOKED,
            actor,
            data={"grant": grant.pk, "student": grant.student.get_username()},
        )
        grant.refresh_from_db()
        close_grant(grant, actor, now)
    return grant
