"""The agent API (``/api/agent/v1/``): the only way node agents talk to the portal.

Agents authenticate with ``Authorization: Node <token>``; the token is stored hashed.
Every body and answer is a model of ``nodeagent.protocol``, the one definition of the wire
shared with the agent: requests are validated with it (400 :class:`ErrorAnswer` naming each
field that is wrong or unknown), answers are built from it, and the OpenAPI schema of these
endpoints is generated from it (``drf_spectacular.contrib.pydantic``).
"""

from __future__ import annotations

from typing import Any, TypeVar

from django.conf import settings
from django.urls import include, path, re_path
from django.utils import timezone
from django.utils.translation import gettext as _
from drf_spectacular.contrib.pydantic import PydanticExtension
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.plumbing import ResolvedComponent
from drf_spectacular.utils import OpenApiParameter, extend_schema
from pydantic import BaseModel, ValidationError
from pydantic.json_schema import JsonSchemaMode, model_json_schema
from rest_framework import authentication, exceptions, permissions, status
from rest_framework.parsers import JSONParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from nodeagent.protocol import (
    ID_MAX,
    WARM_KEY_PATTERN,
    ConflictAnswer,
    DesiredState,
    DetailAnswer,
    ErrorAnswer,
    FieldError,
    Heartbeat,
    HeartbeatAnswer,
    Registration,
    RegistrationAnswer,
    ReportAnswer,
    ReportBatch,
    ReportBatchAnswer,
    SessionReport,
    WarmReport,
    to_wire,
)
from scheduling.models import Node, Session
from scheduling.services import Conflict, ServiceError
from scheduling.services.agent_sessions import desired_state, do_report, do_report_batch
from scheduling.services.installation import installation_id
from scheduling.services.nodes import do_heartbeat, do_register, node_for_token
from scheduling.services.warm import do_warm_report

MAX_ERRORS = 50  # field errors listed in a 400 answer
MAX_ERRORS_IN_DETAIL = 5  # of which its one-line ``detail`` names


class NodeTokenAuthentication(authentication.BaseAuthentication):
    keyword = "Node"

    def authenticate(self, request: Request):
        try:
            header = authentication.get_authorization_header(request).decode()
        except UnicodeDecodeError:
            raise exceptions.AuthenticationFailed(
                _("The Authorization header is not ASCII.")
            ) from None
        if not header.startswith(f"{self.keyword} "):
            return None
        node = node_for_token(header[len(self.keyword) + 1 :].strip())
        if node is None:
            raise exceptions.AuthenticationFailed(_("Unknown node token; register again."))
        return (NodeIdentity(node), node)

    def authenticate_header(self, request: Request) -> str:
        return self.keyword


class NodeIdentity:
    """What ``request.user`` is for an agent: authenticated, never a person."""

    is_authenticated = True
    is_staff = False

    def __init__(self, node: Node):
        self.node = node


class IsNode(permissions.BasePermission):
    def has_permission(self, request: Request, view) -> bool:
        return isinstance(request.auth, Node)


class InvalidMessage(exceptions.APIException):
    """400 with an :class:`~nodeagent.protocol.ErrorAnswer`: what is wrong, field by field."""

    status_code = status.HTTP_400_BAD_REQUEST
    default_code = "invalid"

    def __init__(self, message: type[BaseModel], error: ValidationError) -> None:
        # Set directly: APIException would turn every value into a string.
        self.detail = to_wire(error_answer(message, error))  # type: ignore[assignment]


class InvalidField(exceptions.APIException):
    """400 with an :class:`~nodeagent.protocol.ErrorAnswer` about one field."""

    status_code = status.HTTP_400_BAD_REQUEST
    default_code = "invalid"

    def __init__(self, field: str, message: str, kind: str = "value_error") -> None:
        answer = ErrorAnswer(
            detail=f"{field}: {message}",
            errors=[FieldError(field=field, message=message, type=kind)],
        )
        self.detail = to_wire(answer)  # type: ignore[assignment]


def check_session_id(session_id: int) -> int:
    """A session id from a URL: one a session could have, else 400 (never a database error)."""
    if not 1 <= session_id <= ID_MAX:
        raise InvalidField(
            "session_id",
            f"Input should be between 1 and {ID_MAX}: no session has the id {session_id}.",
            "less_than_equal",
        )
    return session_id


def error_answer(message: type[BaseModel], error: ValidationError) -> ErrorAnswer:
    """What is wrong with a body that is not a valid ``message``, field by field."""
    errors = [
        FieldError(
            field=".".join(str(part) for part in problem["loc"]) or "(body)",
            message=problem["msg"],
            type=problem["type"],
        )
        for problem in error.errors(include_url=False, include_input=False)[:MAX_ERRORS]
    ]
    shown = "; ".join(f"{e.field}: {e.message}" for e in errors[:MAX_ERRORS_IN_DETAIL])
    more = len(errors) - MAX_ERRORS_IN_DETAIL
    summary = f"{shown}; and {more} more" if more > 0 else shown
    return ErrorAnswer(detail=f"Invalid {message.__name__}: {summary}", errors=errors)


M = TypeVar("M", bound=BaseModel)


def read_message(request: Request, message: type[M]) -> M:
    """The request body as ``message``, or InvalidMessage (400) saying what is wrong."""
    try:
        return message.model_validate(request.data)
    except ValidationError as error:
        raise InvalidMessage(message, error) from None


def answer(message: BaseModel, status_code: int = status.HTTP_200_OK) -> Response:
    return Response(to_wire(message), status=status_code)


class NodeTokenScheme(OpenApiAuthenticationExtension):
    """``Authorization: Node <token>`` in the schema."""

    target_class = NodeTokenAuthentication
    name = "nodeToken"

    def get_security_definition(self, auto_schema: Any) -> dict[str, Any]:
        return {
            "type": "apiKey",
            "in": "header",
            "name": "Authorization",
            "description": "`Node <token>`: the node token the first registration answered.",
        }


class ProtocolModelSchema(PydanticExtension):
    """The agent API's bodies and answers in the schema, from their pydantic models.

    drf-spectacular's pydantic extension, with pydantic's JSON Schema (2020-12) written the
    way OpenAPI 3.0 has it: ``nullable`` instead of a ``null`` type, ``example`` instead of
    ``examples``, no ``propertyNames``; request bodies in pydantic's validation mode.
    """

    priority = 1

    def map_serializer(self, auto_schema: Any, direction: str) -> dict[str, Any]:
        mode: JsonSchemaMode = "validation" if direction == "request" else "serialization"
        schema = openapi_30(
            model_json_schema(self.target, ref_template="#/components/schemas/{model}", mode=mode)
        )
        for name, sub_schema in schema.pop("$defs", {}).items():
            component = ResolvedComponent(
                name=name, type=ResolvedComponent.SCHEMA, object=name, schema=sub_schema
            )
            auto_schema.registry.register_on_missing(component)
        return schema


def openapi_30(node: Any) -> Any:
    """A JSON Schema (2020-12, as pydantic writes it) as an OpenAPI 3.0 schema object."""
    if isinstance(node, list):
        return [openapi_30(item) for item in node]
    if not isinstance(node, dict):
        return node
    node = {key: openapi_30(value) for key, value in node.items() if key != "propertyNames"}
    if isinstance(examples := node.get("examples"), list):
        del node["examples"]
        if examples:
            node["example"] = examples[0]
    if "const" in node:
        node["enum"] = [node.pop("const")]
    options = node.get("anyOf")
    if isinstance(options, list) and {"type": "null"} in options:
        rest = [option for option in options if option != {"type": "null"}]
        del node["anyOf"]
        if len(rest) == 1 and "$ref" in rest[0]:
            node["allOf"] = rest  # 3.0 allows nothing beside a $ref
        elif len(rest) == 1:
            node = {**rest[0], **node}
        else:
            node["anyOf"] = rest
        node["nullable"] = True
    return node


# Answers every view with a body may give besides its own.
ERRORS = {400: ErrorAnswer, 401: DetailAnswer, 415: DetailAnswer}


class AgentView(APIView):
    authentication_classes = [NodeTokenAuthentication]
    permission_classes = [IsNode]
    parser_classes = [JSONParser]  # anything else is answered 415

    @property
    def node(self) -> Node:
        node = self.request.auth
        assert isinstance(node, Node)  # IsNode let only a node's token in
        return node


class RegisterView(AgentView):
    permission_classes = [permissions.AllowAny]

    @extend_schema(
        request=Registration,
        responses={200: RegistrationAnswer, 201: RegistrationAnswer, 409: ConflictAnswer, **ERRORS},
    )
    def post(self, request: Request) -> Response:
        body = read_message(request, Registration)
        known = request.auth if isinstance(request.auth, Node) else None
        try:
            node, plain_token = do_register(body, known)
        except ServiceError as error:
            if error.code == "auth":
                raise exceptions.AuthenticationFailed(error.message) from error
            if error.field and error.code == "invalid":
                raise InvalidField(error.field, error.message) from error
            raise  # the API exception handler answers it
        registered = RegistrationAnswer(
            node_id=node.pk,
            heartbeat_interval_s=settings.AGENT_HEARTBEAT_INTERVAL_S,
            poll_interval_s=settings.AGENT_POLL_INTERVAL_S,
            wait_s=settings.AGENT_WAIT_S,
            installation_id=installation_id(),
            **({"node_token": plain_token} if plain_token else {}),
        )
        return answer(registered, status.HTTP_201_CREATED if plain_token else status.HTTP_200_OK)


class HeartbeatView(AgentView):
    @extend_schema(request=Heartbeat, responses={200: HeartbeatAnswer, **ERRORS})
    def post(self, request: Request) -> Response:
        do_heartbeat(self.node, read_message(request, Heartbeat))
        return answer(HeartbeatAnswer(ok=True, server_time=timezone.now()))


class DesiredView(AgentView):
    @extend_schema(responses={200: DesiredState, 401: DetailAnswer})
    def get(self, request: Request) -> Response:
        # ``warm``: desktops to keep started for class bookings (an older agent ignores it).
        return answer(desired_state(self.node))


class ReportView(AgentView):
    @extend_schema(
        request=SessionReport,
        responses={200: ReportAnswer, 404: DetailAnswer, 409: ConflictAnswer, **ERRORS},
    )
    def post(self, request: Request, session_id: int) -> Response:
        check_session_id(session_id)
        body = read_message(request, SessionReport)
        try:
            session = do_report(self.node, session_id, body)
        except Conflict as error:
            # A conflict is only ever about a session this node holds or once held.
            current = Session.objects.filter(pk=session_id).values_list("state", flat=True)
            conflict = ConflictAnswer(detail=error.message, state=current.first())
            return answer(conflict, status.HTTP_409_CONFLICT)
        return answer(ReportAnswer(state=session.state))


class ReportBatchView(AgentView):
    @extend_schema(request=ReportBatch, responses={200: ReportBatchAnswer, **ERRORS})
    def post(self, request: Request) -> Response:
        body = read_message(request, ReportBatch)
        return answer(ReportBatchAnswer(results=do_report_batch(self.node, body.reports)))


class WarmReportView(AgentView):
    @extend_schema(
        request=WarmReport,
        parameters=[OpenApiParameter("key", str, OpenApiParameter.PATH, pattern=WARM_KEY_PATTERN)],
        responses={200: ReportAnswer, 409: ConflictAnswer, **ERRORS},
    )
    def post(self, request: Request, key: str) -> Response:
        body = read_message(request, WarmReport)
        try:
            warm = do_warm_report(self.node, key, body)
        except Conflict as error:
            return answer(ConflictAnswer(detail=error.message), status.HTTP_409_CONFLICT)
        return answer(ReportAnswer(state=warm.state))


urlpatterns = [
    path("register/", RegisterView.as_view(), name="agent-register"),
    path("heartbeat/", HeartbeatView.as_view(), name="agent-heartbeat"),
    path("desired/", DesiredView.as_view(), name="agent-desired"),
    path("sessions/<int:session_id>/report/", ReportView.as_view(), name="agent-report"),
    path("reports/", ReportBatchView.as_view(), name="agent-reports"),
    re_path(
        WARM_KEY_PATTERN.replace("^", r"^warm/(?P<key>", 1).replace("$", r")/report/$"),
        WarmReportView.as_view(),
        name="agent-warm-report",
    ),
    # The Files page's home tasks (issue 27): POST home-tasks/<id>/report/. Included by
    # name: that module builds on this one's views.
    path("", include("portal.agents.home_tasks")),
    # The desktop gateway's reports (issue 34): POST gateway-events/.
    path("", include("portal.agents.gateway_events")),
    # Course folders (docs/course-files.md): GET courses/<id>/manifest/, files/<sha256>/.
    path("", include("portal.agents.course_files")),
]
