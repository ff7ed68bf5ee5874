"""People-facing records: courses and who is enrolled in them."""

from __future__ import annotations

from datetime import date
from typing import TYPE_CHECKING, Any, TypeVar
from zoneinfo import available_timezones

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _
from guardian.shortcuts import get_objects_for_user

# API tokens live in their own module; importing them here registers them with the app.
from people.tokens import ApiToken  # noqa: F401

if TYPE_CHECKING:
    from django.contrib.auth.models import AnonymousUser, User

QS = TypeVar("QS", bound=models.QuerySet[Any])


def visible_through(queryset: QS, user: User | AnonymousUser, permission: str, own: Q) -> QS:
    """Rows a person may read: all for admins; else their ``own`` rows and the rows granted
    to them with django-guardian's object ``permission``. Nothing for anonymous users."""
    if not user.is_authenticated:
        return queryset.none()
    if user.is_staff:
        return queryset.all()
    model = queryset.model
    granted = get_objects_for_user(user, permission, klass=model, accept_global_perms=False)
    readable = model._default_manager.filter(own | Q(pk__in=granted.values("pk")))
    return queryset.filter(pk__in=readable.values("pk"))


class CourseQuerySet(models.QuerySet["Course"]):
    def visible_to(self, user: User | AnonymousUser) -> CourseQuerySet:
        """Courses this user may read: taught or taken, all for admins, and guardian grants."""
        own = Q(instructors=user) | Q(students=user)
        return visible_through(self, user, "portal.view_course", own)


COURSE_CODE_MAX = 40  # what forms and the API take as a course's code, too


class Course(models.Model):
    """A class taught with pool desktops; coursework requests name one. Its default desktop
    is ``scheduling.CourseDesktop`` (links point down, from scheduling to here)."""

    code = models.SlugField(max_length=COURSE_CODE_MAX, unique=True)
    title = models.CharField(max_length=200)
    department = models.CharField(max_length=100, blank=True)
    instructors = models.ManyToManyField(
        settings.AUTH_USER_MODEL, related_name="courses_taught", blank=True
    )
    students = models.ManyToManyField(
        settings.AUTH_USER_MODEL, related_name="courses_enrolled", blank=True
    )
    objects = CourseQuerySet.as_manager()

    class Meta:
        ordering = ["code"]
        # What an instructor grants a TA on one course (django-guardian object permissions).
        permissions = [
            ("view_live_class", _("See the live class")),
            ("manage_class_desktops", _("Start and stop students' desktops")),
            ("answer_quota_requests", _("Answer quota requests")),
            ("manage_course_files", _("Put files into the course folder")),
        ]

    def __str__(self) -> str:
        return self.code


def validate_time_zone(name: str) -> None:
    """A time zone name the IANA database (zoneinfo) knows; blank means the campus default."""
    if name and name not in available_timezones():
        raise ValidationError(
            gettext(
                "%(name)s is not a time zone we know. Pick one from the list, such as %(example)s."
            )
            % {"name": name, "example": "Asia/Shanghai"},
            code="time_zone",
        )


class Role(models.TextChoices):
    """What a person is on campus (admins are Django staff)."""

    STUDENT = "student", _("Student")
    FACULTY = "faculty", _("Faculty")


class Member(models.Model):
    """What the portal knows about a person beyond the login: their department, and the
    language and time zone they chose (blank: the browser's language, the campus zone)."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, related_name="member", on_delete=models.CASCADE
    )
    department = models.CharField(max_length=100, blank=True)
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.STUDENT)
    student_id = models.CharField(max_length=40, blank=True, help_text=_("Campus student id."))
    language = models.CharField(
        _("language"),
        max_length=10,
        blank=True,
        choices=settings.LANGUAGES,
        help_text=_("Blank: the language your browser asks for."),
    )
    time_zone = models.CharField(
        _("time zone"),
        max_length=64,
        blank=True,
        validators=[validate_time_zone],
        help_text=_("Blank: the campus time zone."),
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["student_id"], condition=~Q(student_id=""), name="one_member_per_student_id"
            )
        ]

    def __str__(self) -> str:
        return f"{self.user} ({self.department or 'no department'})"


class ThesisGrantQuerySet(models.QuerySet["ThesisGrant"]):
    def active(self, today: date | None = None) -> ThesisGrantQuerySet:
        """Grants in force on ``today`` (the campus date): not revoked, not past ``until``."""
        today = today or timezone.localdate()
        return self.filter(revoked_at=None, until__gte=today)

    def visible_to(self, user: User | AnonymousUser) -> ThesisGrantQuerySet:
        """Grants a person may read: their own, the ones they gave, all for admins."""
        if not user.is_authenticated:
            return self.none()
        if user.is_staff:
            return self.all()
        return self.filter(Q(student=user) | Q(granted_by=user))


class ThesisGrant(models.Model):
    """An advisor's (faculty) or an admin's grant of thesis status to a student until a date
    (inclusive, campus date). Revoking it or reaching its end turns the student's queued
    thesis requests into ordinary ones (``closed_at`` records that this was done)."""

    student = models.ForeignKey(
        settings.AUTH_USER_MODEL, related_name="thesis_grants", on_delete=models.CASCADE
    )
    granted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, related_name="+", on_delete=models.SET_NULL
    )
    until = models.DateField()
    note = models.CharField(max_length=300, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoked_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, related_name="+", on_delete=models.SET_NULL
    )
    closed_at = models.DateTimeField(null=True, blank=True)

    objects = ThesisGrantQuerySet.as_manager()

    class Meta:
        ordering = ["-until", "-pk"]

    def __str__(self) -> str:
        return f"thesis grant {self.pk} for {self.student} until {self.until}"
