"""The console's course folders (docs/course-files.md): each course's folder, what it holds
against its cap, and the cap (MB; empty: DESKPOOL_COURSE_FOLDER_MB), set here and audited."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_GET, require_POST

from people.models import Course
from portal.console.access import admin_only
from scheduling.services import ServiceError
from scheduling.services.course_files import MB, check_cap, do_set_cap, folders_with_use


def _page(request: HttpRequest, status: int = 200, **extra: object) -> HttpResponse:
    context = {
        "courses": folders_with_use(),
        "default_mb": settings.COURSE_FOLDER_MB,
        "mb": MB,
        **extra,
    }
    return render(request, "console/course_folders.html", context, status=status)


@admin_only
@require_GET
def course_folders(request: HttpRequest) -> HttpResponse:
    return _page(request)


@admin_only
@require_POST
def course_folder_cap(request: HttpRequest, course_id: int) -> HttpResponse:
    course = Course.objects.filter(pk=course_id).first()
    if course is None:
        raise Http404(_("No such course."))
    try:
        cap = check_cap(request.POST.get("cap_mb", ""))
    except ServiceError as error:
        return _page(request, 400, error=error.message, error_course=course.pk)
    do_set_cap(request.user, course, cap)  # type: ignore[arg-type]
    messages.success(request, _("The cap of %(course)s is saved.") % {"course": course.code})
    return redirect("console-course-folders")
