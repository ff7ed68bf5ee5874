"""The agent API's home-task call (issue 27; nodeagent/protocol_files.py), node-token
authenticated like the rest of ``/api/agent/v1/``:

``POST home-tasks/<id>/report/``
    :class:`HomeTaskReport` -> :class:`HomeTaskAnswer`.

Another node's task, or none, is 404 :class:`DetailAnswer`; a task no longer PENDING 409
:class:`ConflictAnswer`; a task of a kind nodes no longer carry out (an upload or download of
an older agent) 400. A file's bytes never come here: they go through the node's gateway
(nodeagent/gateway/files.py). The logic is in ``scheduling.services.home_files_agent``.
"""

from __future__ import annotations

from django.urls import path
from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response

from nodeagent.protocol import ID_MAX, ConflictAnswer, DetailAnswer
from nodeagent.protocol_files import HomeTaskAnswer, HomeTaskReport
from scheduling.models import HomeTask
from scheduling.services import Conflict, NotFound, ServiceError
from scheduling.services.home_files_agent import do_home_report

from .api import ERRORS, AgentView, InvalidField, answer, read_message

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
    raise InvalidField(error.field or "(body)", error.message)


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
        "home-tasks/<int:task_id>/report/",
        HomeTaskReportView.as_view(),
        name="agent-home-task-report",
    ),
]
