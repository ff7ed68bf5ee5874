"""The course page's folder (docs/course-files.md): upload files into it, delete them.

Instructors and admins, and TAs with ``manage_course_files``; anyone else gets a 404. The
service (``scheduling.services.course_files``) checks names, sizes and the course's cap.
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.models import User
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.utils.translation import gettext as _
from django.utils.translation import ngettext
from django.views.decorators.http import require_POST

from portal.kit.confirm import confirm_first
from portal.kit.person import with_person
from portal.teaching.courses import _detail, _role
from scheduling.models import CourseFile
from scheduling.services import NotFound, ServiceError
from scheduling.services.course_files import check_upload, do_delete, do_upload

FOLDER_ANCHOR = "#course-files"


def _back(code: str) -> str:
    return reverse("course-detail", args=[code]) + FOLDER_ANCHOR


@with_person
@require_POST
def upload(request: HttpRequest, person: User, code: str) -> HttpResponse:
    role = _role(request, code, "manage_course_files")
    try:
        plan = check_upload(role, request.FILES.getlist("files"), request.POST.get("folder", ""))
        rows = do_upload(person, plan)  # checks the cap again, under the folder's lock
    except ServiceError as error:
        return _detail(request, role, 400, course_files_error=error.message)
    messages.success(
        request,
        ngettext(
            "%(count)s file is in the course folder.",
            "%(count)s files are in the course folder.",
            len(rows),
        )
        % {"count": len(rows)},
    )
    return redirect(_back(code))


@with_person
@require_POST
def delete(request: HttpRequest, person: User, code: str, file_id: int) -> HttpResponse:
    role = _role(request, code, "manage_course_files")
    name = (
        CourseFile.objects.filter(course=role.course, pk=file_id)
        .values_list("path", flat=True)
        .first()
    )
    ask = confirm_first(request, "delete_course_file", _back(code), name=name or "")
    if ask is not None:
        return ask
    try:
        row = do_delete(person, role, file_id)
    except NotFound as error:
        messages.warning(request, error.message)
    else:
        messages.success(request, _("%(name)s is deleted.") % {"name": row.path})
    return redirect(_back(code))
