"""The agent API's course-folder calls (docs/course-files.md; nodeagent/protocol_courses.py),
node-token authenticated like the rest of ``/api/agent/v1/``:

``GET courses/<course_id>/manifest/``
    -> :class:`CourseManifest`.
``GET courses/<course_id>/files/<sha256>/``
    -> the file's bytes, streamed from the portal's store (whole: the agent checks its sha256).

A node that runs no desktop needing the folder gets 404 :class:`DetailAnswer`, as if the course
did not exist. The logic is in ``scheduling.services.course_files_agent``.
"""

from __future__ import annotations

from django.http import FileResponse
from django.urls import path
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response

from nodeagent.protocol import ID_MAX, DetailAnswer, ErrorAnswer
from nodeagent.protocol_courses import CourseManifest
from scheduling.services import NotFound
from scheduling.services.course_files import blob_path
from scheduling.services.course_files_agent import file_for, manifest_for

from .api import AgentView, InvalidField, answer

# 400: a course id out of range (ErrorAnswer naming course_id), as the other calls' ids.
NOT_FOUND = {400: ErrorAnswer, 401: DetailAnswer, 404: DetailAnswer}


def check_course_id(course_id: int) -> int:
    if not 1 <= course_id <= ID_MAX:
        raise InvalidField("course_id", f"Input should be between 1 and {ID_MAX}.")
    return course_id


def not_found(error: NotFound) -> Response:
    return answer(DetailAnswer(detail=error.message), status.HTTP_404_NOT_FOUND)


class CourseManifestView(AgentView):
    @extend_schema(responses={200: CourseManifest, **NOT_FOUND})
    def get(self, request: Request, course_id: int) -> Response:
        try:
            return answer(manifest_for(self.node, check_course_id(course_id)))
        except NotFound as error:
            return not_found(error)


class CourseFileView(AgentView):
    @extend_schema(
        responses={200: OpenApiResponse(OpenApiTypes.BINARY), **NOT_FOUND},
    )
    def get(self, request: Request, course_id: int, sha256: str) -> Response | FileResponse:
        check_course_id(course_id)
        try:
            found = file_for(self.node, course_id, sha256, blob_path(sha256))
        except NotFound as error:
            return not_found(error)
        return FileResponse(found.open("rb"), content_type="application/octet-stream")


urlpatterns = [
    path(
        "courses/<int:course_id>/manifest/",
        CourseManifestView.as_view(),
        name="agent-course-manifest",
    ),
    path(
        "courses/<int:course_id>/files/<str:sha256>/",
        CourseFileView.as_view(),
        name="agent-course-file",
    ),
]
