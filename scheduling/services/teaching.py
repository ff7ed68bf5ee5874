"""Who teaches what: instructors, TAs (django-guardian object permissions on a Course) and
admins, the one place every course page, API view and consumer asks. Also the instructor's
changes to a course: its TAs and its settings (default desktop, quota), as check_/do_ pairs.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth.models import AnonymousUser, User
from django.db import transaction
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from guardian.shortcuts import (
    assign_perm,
    get_objects_for_user,
    get_perms,
    get_users_with_perms,
    remove_perm,
)

from people.models import Course, CourseQuerySet
from scheduling.choices import ON_NODE_STATES, AuditKind
from scheduling.excerpt import excerpt
from scheduling.models import (
    AuditEvent,
    DesktopProfile,
    Quota,
    QuotaScope,
    default_profile_of,
    set_default_profile,
)
from scheduling.services import ServiceError
from scheduling.services.usage import collect_usage

# What an instructor may grant a TA on one course, in the order the pages list them.
TA_PERMISSIONS: dict[str, object] = {
    "view_live_class": gettext_lazy("See the live class"),
    "manage_class_desktops": gettext_lazy("Start and stop students' desktops"),
    "answer_quota_requests": gettext_lazy("Answer quota requests"),
    "manage_course_files": gettext_lazy("Put files into the course folder"),
}


@dataclass(frozen=True)
class CourseRole:
    """What one person may do on one course."""

    course: Course
    teacher: bool  # an instructor or an admin: everything
    view_live_class: bool
    manage_class_desktops: bool
    answer_quota_requests: bool
    manage_course_files: bool = False  # the course folder (docs/course-files.md)

    @property
    def is_ta(self) -> bool:
        return not self.teacher


def _actor(user: User) -> str:
    return f"user:{user.get_username()}"


def teaching_courses(user: User | AnonymousUser) -> CourseQuerySet:
    """Courses a person teaches, assists (any TA permission) or, for admins, all."""
    if not user.is_authenticated:
        return Course.objects.none()
    if user.is_staff:
        return Course.objects.all()
    assisted = get_objects_for_user(
        user,
        [f"portal.{name}" for name in TA_PERMISSIONS],
        klass=Course,
        any_perm=True,
        accept_global_perms=False,
    )
    return Course.objects.filter(Q(instructors=user) | Q(pk__in=assisted.values("pk"))).distinct()


def course_role(user: User | AnonymousUser, course: Course) -> CourseRole | None:
    """The person's role on the course, or None when they do not teach or assist it (a
    student of the course included)."""
    if not user.is_authenticated:
        return None
    if user.is_staff or course.instructors.filter(pk=user.pk).exists():
        return CourseRole(course, True, True, True, True, True)
    granted = set(get_perms(user, course))
    if not granted & TA_PERMISSIONS.keys():
        return None
    return CourseRole(
        course,
        False,
        "view_live_class" in granted,
        "manage_class_desktops" in granted,
        "answer_quota_requests" in granted,
        "manage_course_files" in granted,
    )


def role_by_code(user: User | AnonymousUser, code: str) -> CourseRole | None:
    """The person's role on the course with this code; None if unknown or not theirs."""
    course = Course.objects.filter(code=code).select_related("default_desktop__profile").first()
    return None if course is None else course_role(user, course)


# --- TAs ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class TaGrant:
    user: User
    permissions: frozenset[str]


def course_tas(course: Course) -> list[TaGrant]:
    """The course's TAs and what each may do, by username."""
    holders: dict[User, list[str]] = get_users_with_perms(  # type: ignore[assignment]
        course, attach_perms=True, with_superusers=False, with_group_users=False
    )
    grants = [
        TaGrant(user, frozenset(set(perms) & TA_PERMISSIONS.keys()))
        for user, perms in holders.items()
    ]
    return sorted((g for g in grants if g.permissions), key=lambda g: g.user.get_username())


def check_ta(course: Course, username: str, permissions: list[str] | set[str]) -> TaGrant:
    """A TA grant to make: an existing person who is not an instructor, with known rights."""
    username = (username or "").strip()
    user = User.objects.filter(username=username).first() if username else None
    if user is None:
        raise ServiceError(
            _("No one has the username “%(name)s”. Check the spelling; they must sign in once.")
            % {"name": excerpt(username)},
            field="username",
        )
    if course.instructors.filter(pk=user.pk).exists():
        raise ServiceError(
            _("%(name)s already teaches this course and may do everything.") % {"name": username},
            field="username",
        )
    unknown = set(permissions) - TA_PERMISSIONS.keys()
    if unknown:
        raise ServiceError(
            _("Unknown permission: %(names)s. Choose from: %(known)s.")
            % {"names": ", ".join(sorted(unknown)), "known": ", ".join(TA_PERMISSIONS)},
            field="permissions",
        )
    if not permissions:
        raise ServiceError(
            _("Tick at least one thing the TA may do (or remove the TA)."), field="permissions"
        )
    return TaGrant(user, frozenset(permissions))


def do_set_ta(actor: User, course: Course, grant: TaGrant) -> None:
    """Give the TA exactly ``grant.permissions`` on the course (plus view_course), audited."""
    with transaction.atomic():
        before = set(get_perms(grant.user, course)) & TA_PERMISSIONS.keys()
        for name in TA_PERMISSIONS:
            if name in grant.permissions and name not in before:
                assign_perm(f"portal.{name}", grant.user, course)
            elif name not in grant.permissions and name in before:
                remove_perm(f"portal.{name}", grant.user, course)
        assign_perm("portal.view_course", grant.user, course)
        AuditEvent.objects.create(
            kind=AuditKind.TA_GRANTS_CHANGED,
            actor=_actor(actor),
            data={
                "course": course.code,
                "ta": grant.user.get_username(),
                "before": sorted(before),
                "after": sorted(grant.permissions),
            },
        )


def do_remove_ta(actor: User, course: Course, user: User) -> None:
    """Take every TA permission (and view_course) on the course from the person, audited."""
    with transaction.atomic():
        before = set(get_perms(user, course)) & TA_PERMISSIONS.keys()
        for name in [*TA_PERMISSIONS, "view_course"]:
            remove_perm(f"portal.{name}", user, course)
        AuditEvent.objects.create(
            kind=AuditKind.TA_GRANTS_CHANGED,
            actor=_actor(actor),
            data={
                "course": course.code,
                "ta": user.get_username(),
                "before": sorted(before),
                "after": [],
            },
        )


# --- Course settings -----------------------------------------------------------------------

MAX_COURSE_SESSIONS = 1000
MAX_COURSE_GPU_HOURS = 100000.0


@dataclass(frozen=True)
class CourseSettings:
    default_profile: DesktopProfile | None
    max_sessions: int | None
    max_gpu_hours_week: float | None


@dataclass(frozen=True)
class CourseUse:
    """What the course uses now, beside its limits."""

    sessions: int
    gpu_hours_week: float
    quota: Quota | None


def course_quota(course: Course) -> Quota | None:
    return Quota.objects.filter(scope=QuotaScope.COURSE, key=course.code).first()


def course_use(course: Course) -> CourseUse:
    """Desktops the course holds now and its GPU-hours over the last 7 days."""
    usage = collect_usage(timezone.now(), 7.0, ON_NODE_STATES)
    key = (QuotaScope.COURSE.value, course.code)
    return CourseUse(
        sessions=usage.holding.get(key, 0),
        gpu_hours_week=round(usage.week.get(key, 0.0), 2),
        quota=course_quota(course),
    )


def check_course_settings(
    profile_id: int | None, max_sessions: int | None, max_gpu_hours_week: float | None
) -> CourseSettings:
    """Validate a course's settings: an active profile (or none) and sensible limits."""
    profile = None
    if profile_id is not None:
        profile = DesktopProfile.objects.filter(pk=profile_id, active=True).first()
        if profile is None:
            raise ServiceError(
                _("No such desktop profile. Pick one from the list, or none."),
                field="default_profile",
            )
    if max_sessions is not None and not 0 <= max_sessions <= MAX_COURSE_SESSIONS:
        raise ServiceError(
            _("Enter a number of desktops from 0 to %(max)s, or leave it empty for no limit.")
            % {"max": MAX_COURSE_SESSIONS},
            field="max_sessions",
        )
    if max_gpu_hours_week is not None and not 0 <= max_gpu_hours_week <= MAX_COURSE_GPU_HOURS:
        raise ServiceError(
            _("Enter GPU-hours from 0 to %(max)s, or leave it empty for no limit.")
            % {"max": int(MAX_COURSE_GPU_HOURS)},
            field="max_gpu_hours_week",
        )
    return CourseSettings(profile, max_sessions, max_gpu_hours_week)


def do_save_course_settings(actor: User, course: Course, settings: CourseSettings) -> None:
    """Store the course's default profile and its course quota row, audited."""
    with transaction.atomic():
        before_quota = course_quota(course)
        before = {
            "default_profile": getattr(default_profile_of(course), "pk", None),
            "max_sessions": before_quota.max_sessions if before_quota else None,
            "max_gpu_hours_week": before_quota.max_gpu_hours_week if before_quota else None,
        }
        set_default_profile(course, settings.default_profile)
        Quota.objects.update_or_create(
            scope=QuotaScope.COURSE,
            key=course.code,
            defaults={
                "max_sessions": settings.max_sessions,
                "max_gpu_hours_week": settings.max_gpu_hours_week,
            },
        )
        AuditEvent.objects.create(
            kind=AuditKind.COURSE_SETTINGS_CHANGED,
            actor=_actor(actor),
            data={
                "course": course.code,
                "before": before,
                "after": {
                    "default_profile": settings.default_profile.pk
                    if settings.default_profile
                    else None,
                    "max_sessions": settings.max_sessions,
                    "max_gpu_hours_week": settings.max_gpu_hours_week,
                },
            },
        )
