"""The agent API's home-task calls (issue 27; nodeagent/protocol_files.py), node-token
authenticated like the rest of ``/api/agent/v1/``:

``GET home-tasks/<id>/content/``
    A PENDING upload's bytes, ``application/octet-stream``.
``PUT home-tasks/<id>/content/``
    A PENDING download's bytes, ``application/octet-stream`` (else 415), at most
    ``HOME_TRANSFER_MAX_MB`` (else 413), read from the request in chunks (never
    ``request.body``, which DATA_UPLOAD_MAX_MEMORY_SIZE would refuse).
``POST home-tasks/<id>/report/``
    :class:`HomeTaskReport` -> :class:`HomeTaskAnswer`.

Another node's task, or none, is 404 :class:`DetailAnswer`; a task no longer PENDING (or of
another kind) 409 :class:`ConflictAnswer`. The logic is in
``scheduling.services.home_files_agent``.
"""

from __future__ import annotations

from typing import IO, cast

from django.http import HttpResponse
from django.urls import path
from django.utils.translation import gettext as _
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response

from nodeagent.protocol import ID_MAX, ConflictAnswer, DetailAnswer
from nodeagent.protocol_files import HomeTaskAnswer, HomeTaskReport
from scheduling.models import HomeTask
from scheduling.services import Conflict, NotFound, ServiceError
from scheduling.services.home_files_agent import (
    TooLarge,
    content_for_agent,
    do_home_report,
    store_download,
)

from .api import ERRORS, AgentView, InvalidField, answer, read_message

OCTET_STREAM = "application/octet-stream"
BINARY = OpenApiResponse(response=OpenApiTypes.BINARY, description="The file's bytes.")
TASK_ERRORS = {404: DetailAnswer, 409: ConflictAnswer}


def check_task_id(task_id: int) -> int:
    """A task id from a URL: one a task could have, else 400 (never a database error)."""
    if not 1 <= task_id <= ID_MAX:
        raise InvalidField(
            "task_id",
            f"Input should be between 1 and {ID_MAX}: no task has the id {task_id}.",
            "less_than_equal",
        )
    return task_id


def refused(task_id: int, error: ServiceError) -> Response:
    """A service refusal as the agent API answers it."""
    if isinstance(error, NotFound):
        return answer(DetailAnswer(detail=error.message), status.HTTP_404_NOT_FOUND)
    if isinstance(error, Conflict):
        state = HomeTask.objects.filter(pk=task_id).values_list("state", flat=True).first()
        conflict = ConflictAnswer(detail=error.message, state=state)
        return answer(conflict, status.HTTP_409_CONFLICT)
    if isinstance(error, TooLarge):
        too_large = DetailAnswer(detail=error.message)
        return answer(too_large, status.HTTP_413_REQUEST_ENTITY_TOO_LARGE)
    raise InvalidField(error.field or "(body)", error.message)


class HomeTaskContentView(AgentView):
    @extend_schema(
        responses={(200, OCTET_STREAM): BINARY, **TASK_ERRORS, 400: ERRORS[400], 401: DetailAnswer}
    )
    def get(self, request: Request, task_id: int) -> HttpResponse:
        check_task_id(task_id)
        try:
            data = content_for_agent(self.node, task_id)
        except ServiceError as error:
            return refused(task_id, error)
        return HttpResponse(data, content_type=OCTET_STREAM)

    @extend_schema(
        request={OCTET_STREAM: OpenApiTypes.BINARY},
        responses={200: HomeTaskAnswer, **TASK_ERRORS, 413: DetailAnswer, **ERRORS},
    )
    def put(self, request: Request, task_id: int) -> Response:
        check_task_id(task_id)
        if (request.content_type or "").split(";")[0].strip().lower() != OCTET_STREAM:
            unsupported = DetailAnswer(
                detail=_("Send the file's bytes as %(type)s.") % {"type": OCTET_STREAM}
            )
            return answer(unsupported, status.HTTP_415_UNSUPPORTED_MEDIA_TYPE)
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = 0
        try:
            # The Django request itself: read in chunks, not through request.body.
            store_download(self.node, task_id, cast(IO[bytes], request._request), length)
        except ServiceError as error:
            return refused(task_id, error)
        return answer(HomeTaskAnswer(state="PENDING"))


class HomeTaskReportView(AgentView):
    @extend_schema(request=HomeTaskReport, responses={200: HomeTaskAnswer, **TASK_ERRORS, **ERRORS})
    def post(self, request: Request, task_id: int) -> Response:
        check_task_id(task_id)
        body = read_message(request, HomeTaskReport)
        try:
            state = do_home_report(self.node, task_id, body)
        except ServiceError as error:
            return refused(task_id, error)
        return answer(HomeTaskAnswer(state=state))


urlpatterns = [
    path(
        "home-tasks/<int:task_id>/content/",
        HomeTaskContentView.as_view(),
        name="agent-home-task-content",
    ),
    path(
        "home-tasks/<int:task_id>/report/",
        HomeTaskReportView.as_view(),
        name="agent-home-task-report",
    ),
]
