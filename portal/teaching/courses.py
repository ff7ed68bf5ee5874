"""The instructor's course pages: roster, TAs, settings, bookings and the live class.

Who may see what is decided by ``scheduling.services.teaching.course_role``; anyone it gives no role
(students of the course included) gets a 404.
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.models import User
from django.db.models import Count
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import ngettext
from django.views.decorators.http import require_POST

from portal.kit.confirm import confirm_first
from portal.kit.person import with_person
from portal.teaching.course_forms import (
    AddStudentForm,
    CourseSettingsForm,
    RosterImportForm,
    TaForm,
)
from scheduling.choices import SessionState
from scheduling.models import Booking, default_profile_of
from scheduling.services import ServiceError
from scheduling.services.classroom import (
    class_sessions,
    do_start_all,
    do_stop_all,
    do_stop_class_session,
)
from scheduling.services.course_files import folder_view
from scheduling.services.quota_requests import pending_to_answer
from scheduling.services.roster import do_import_roster, do_remove_student
from scheduling.services.teaching import (
    TA_PERMISSIONS,
    CourseRole,
    course_quota,
    course_tas,
    course_use,
    do_remove_ta,
    do_save_course_settings,
    do_set_ta,
    role_by_code,
    teaching_courses,
)


def _role(request: HttpRequest, code: str, need: str = "") -> CourseRole:
    """The asker's role on the course; 404 when they have none or lack ``need``."""
    role = role_by_code(request.user, code)
    if role is None or (need and not getattr(role, need)):
        raise Http404(_("No such course among the ones you teach."))
    return role


@with_person
def index(request: HttpRequest, person: User) -> HttpResponse:
    courses = teaching_courses(person).annotate(enrolled=Count("students", distinct=True))
    return render(request, "courses/index.html", {"courses": courses})


def _settings_initial(role: CourseRole) -> dict[str, Any]:
    quota = course_quota(role.course)
    return {
        "default_profile": default_profile_of(role.course),
        "max_sessions": quota.max_sessions if quota else None,
        "max_gpu_hours_week": quota.max_gpu_hours_week if quota else None,
    }


def _detail(
    request: HttpRequest, role: CourseRole, status: int = 200, **forms: Any
) -> HttpResponse:
    course = role.course
    context: dict[str, Any] = {"course": course, "role": role, **forms}
    if role.answer_quota_requests:
        waiting = pending_to_answer(request.user).filter(course=course).count()
        context["quota_requests_here"] = waiting
    if role.teacher or role.manage_course_files:
        context["course_folder"] = folder_view(course)  # docs/course-files.md
    if role.teacher:
        context.setdefault("import_form", RosterImportForm(course=course))
        context.setdefault("add_form", AddStudentForm(course=course))
        context.setdefault("ta_form", TaForm(course=course))
        context.setdefault(
            "settings_form", CourseSettingsForm(course=course, initial=_settings_initial(role))
        )
        context["students"] = course.students.select_related("member").order_by("username")
        context["tas"] = course_tas(course)
        context["ta_labels"] = TA_PERMISSIONS
        context["use"] = course_use(course)
        context["bookings"] = (
            Booking.objects.filter(course=course, cancelled_at=None, ends_at__gt=timezone.now())
            .select_related("profile")
            .order_by("starts_at")[:20]
        )
    if role.view_live_class:
        context["class_sessions"] = class_sessions(course)
        context["live"] = {
            "course": course.code,  # the class's socket: #live-wire's course_path
            "words": {
                "live": _("live"),
                "reconnecting": _("reconnecting…"),
                # The socket stopped for good: signed out, or no longer allowed.
                "stopped": _("not live: sign in again, then reload the page"),
                "empty": _("No desktops are open for this course."),
            },
        }
    return render(request, "courses/detail.html", context, status=status)


@with_person
def detail(request: HttpRequest, person: User, code: str) -> HttpResponse:
    return _detail(request, _role(request, code))


@with_person
@require_POST
def roster_import(request: HttpRequest, person: User, code: str) -> HttpResponse:
    role = _role(request, code, "teacher")
    form = RosterImportForm(request.POST, request.FILES, course=role.course)
    if not form.is_valid():
        return _detail(request, role, 400, import_form=form)
    plan = form.checked
    if form.cleaned_data.get("action") != "import":
        # Show what would change, with the file's text kept for the confirming post.
        confirm = RosterImportForm(
            initial={
                "csv_text": form.csv_text_value,
                "sync": plan.sync,
                "action": "import",
            },
            course=role.course,
        )
        return _detail(request, role, import_form=confirm, plan=plan)
    result = do_import_roster(person, role.course, plan)
    messages.success(
        request,
        _(
            "Roster imported: %(added)s added (%(created)s new accounts), %(removed)s removed, "
            "%(unchanged)s unchanged."
        )
        % {
            "added": result.added,
            "created": result.created,
            "removed": result.removed,
            "unchanged": result.unchanged,
        },
    )
    return redirect("course-detail", code=code)


@with_person
@require_POST
def roster_add(request: HttpRequest, person: User, code: str) -> HttpResponse:
    role = _role(request, code, "teacher")
    form = AddStudentForm(request.POST, course=role.course)
    if not form.is_valid():
        return _detail(request, role, 400, add_form=form)
    do_import_roster(person, role.course, form.checked)
    messages.success(request, _("%(name)s is enrolled.") % {"name": form.cleaned_data["identity"]})
    return redirect("course-detail", code=code)


@with_person
@require_POST
def roster_remove(request: HttpRequest, person: User, code: str, user_id: int) -> HttpResponse:
    role = _role(request, code, "teacher")
    student = role.course.students.filter(pk=user_id).first()
    if student is None:
        raise Http404(_("This person is not enrolled."))
    name = student.get_full_name() or student.get_username()
    back = reverse("course-detail", args=[code])
    if (ask := confirm_first(request, "remove_student", back, name=name, course=code)) is not None:
        return ask
    do_remove_student(person, role.course, student)
    messages.success(request, _("%(name)s is no longer enrolled.") % {"name": student})
    return redirect("course-detail", code=code)


@with_person
@require_POST
def ta_save(request: HttpRequest, person: User, code: str) -> HttpResponse:
    role = _role(request, code, "teacher")
    form = TaForm(request.POST, course=role.course)
    if not form.is_valid():
        return _detail(request, role, 400, ta_form=form)
    do_set_ta(person, role.course, form.checked)
    messages.success(request, _("%(name)s's rights are saved.") % {"name": form.checked.user})
    return redirect("course-detail", code=code)


@with_person
@require_POST
def ta_remove(request: HttpRequest, person: User, code: str, user_id: int) -> HttpResponse:
    role = _role(request, code, "teacher")
    ta = User.objects.filter(pk=user_id).first()
    if ta is None:
        raise Http404(_("No such person."))
    name = ta.get_full_name() or ta.get_username()
    back = reverse("course-detail", args=[code])
    if (ask := confirm_first(request, "remove_ta", back, name=name, course=code)) is not None:
        return ask
    do_remove_ta(person, role.course, ta)
    messages.success(request, _("%(name)s is no longer a TA of this course.") % {"name": ta})
    return redirect("course-detail", code=code)


@with_person
@require_POST
def course_settings(request: HttpRequest, person: User, code: str) -> HttpResponse:
    role = _role(request, code, "teacher")
    form = CourseSettingsForm(request.POST, course=role.course)
    if not form.is_valid():
        return _detail(request, role, 400, settings_form=form)
    do_save_course_settings(person, role.course, form.checked)
    messages.success(request, _("The course settings are saved."))
    return redirect("course-detail", code=code)


@with_person
@require_POST
def start_all(request: HttpRequest, person: User, code: str) -> HttpResponse:
    role = _role(request, code, "manage_class_desktops")
    try:
        result = do_start_all(person, role.course)
    except ServiceError as error:
        messages.warning(request, error.message)
        return redirect("course-detail", code=code)
    text = ngettext(
        "%(count)s desktop asked for.", "%(count)s desktops asked for.", result.started
    ) % {"count": result.started}
    if result.already_open:
        text += " " + ngettext(
            "%(count)s student already had one open.",
            "%(count)s students already had one open.",
            result.already_open,
        ) % {"count": result.already_open}
    if result.skipped_at_limit:
        text += " " + ngettext(
            "%(count)s student was skipped: they have the most open sessions allowed.",
            "%(count)s students were skipped: they have the most open sessions allowed.",
            result.skipped_at_limit,
        ) % {"count": result.skipped_at_limit}
    messages.success(request, text)
    return redirect("course-detail", code=code)


@with_person
@require_POST
def stop_all(request: HttpRequest, person: User, code: str) -> HttpResponse:
    role = _role(request, code, "manage_class_desktops")
    back = reverse("course-detail", args=[code])
    if (ask := confirm_first(request, "stop_all", back, course=code)) is not None:
        return ask
    stopped = do_stop_all(person, role.course)
    messages.success(
        request,
        ngettext("%(count)s desktop stopped.", "%(count)s desktops stopped.", stopped)
        % {"count": stopped},
    )
    return redirect("course-detail", code=code)


@with_person
@require_POST
def stop_session(request: HttpRequest, person: User, code: str, session_id: int) -> HttpResponse:
    role = _role(request, code, "manage_class_desktops")
    student = (
        class_sessions(role.course).filter(pk=session_id).values_list("user__username", flat=True)
    )
    back = reverse("course-detail", args=[code])
    ask = confirm_first(request, "stop_student", back, name=student.first() or "")
    if ask is not None:
        return ask
    try:
        session = do_stop_class_session(person, role.course, session_id)
    except ServiceError as error:
        messages.warning(request, error.message)
    else:
        if session.state in (SessionState.STOPPING, SessionState.ENDED, SessionState.CANCELLED):
            messages.success(
                request, _("The desktop of %(name)s is stopping.") % {"name": session.user}
            )
    return redirect("course-detail", code=code)
