"""The agent API (``/api/agent/v1/``): the only way node agents talk to the portal.

Agents authenticate with ``Authorization: Node <token>``; the token is stored hashed.
Message shapes are defined by ``nodeagent.protocol``.
"""

from __future__ import annotations

from django.urls import path, re_path
from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework import authentication, exceptions, permissions, serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from nodeagent.protocol import REASON_MAX_CHARS, WARM_KEY_PATTERN, XID_ERRORS_MAX

from .api_errors import as_api_error
from .models import Node, Session
from .services import ServiceError
from .services.agent_sessions import desired_sessions, do_report
from .services.nodes import do_heartbeat, do_register, node_for_token
from .services.warm import desired_warm, do_warm_report


class NodeTokenAuthentication(authentication.BaseAuthentication):
    keyword = "Node"

    def authenticate(self, request: Request):
        header = authentication.get_authorization_header(request).decode()
        if not header.startswith(f"{self.keyword} "):
            return None
        node = node_for_token(header[len(self.keyword) + 1 :].strip())
        if node is None:
            raise exceptions.AuthenticationFailed("Unknown node token; register again.")
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


class MigSerializer(serializers.Serializer):
    uuid = serializers.CharField()
    profile = serializers.CharField()
    memory_mb = serializers.IntegerField(min_value=0)


class GpuInventorySerializer(serializers.Serializer):
    uuid = serializers.CharField(max_length=100)
    index = serializers.IntegerField(min_value=0)
    name = serializers.CharField(max_length=100)
    memory_mb = serializers.IntegerField(min_value=0)
    compute_capability = serializers.CharField(allow_blank=True)
    mig_mode = serializers.BooleanField()
    mig_instances = MigSerializer(many=True)
    nvlink_peers = serializers.ListField(child=serializers.CharField())
    pci_bus_id = serializers.CharField(allow_blank=True)
    sharing = serializers.ChoiceField(choices=["mig", "share", "whole"])
    share_count = serializers.IntegerField(min_value=1, max_value=64, required=False)
    share_memory_mb = serializers.IntegerField(min_value=1, required=False)
    simulated = serializers.BooleanField()


class RegistrationSerializer(serializers.Serializer):
    protocol_version = serializers.IntegerField()
    agent_version = serializers.CharField(max_length=40)
    hostname = serializers.CharField(max_length=200)
    join_token = serializers.CharField(required=False)
    address = serializers.CharField(max_length=200)
    cpu_count = serializers.IntegerField(min_value=0)
    memory_mb = serializers.IntegerField(min_value=0)
    labels = serializers.DictField(child=serializers.CharField(allow_blank=True))
    runtime = serializers.ChoiceField(choices=["docker", "simulated"])
    gpus = GpuInventorySerializer(many=True)


class GpuMetricsSerializer(serializers.Serializer):
    uuid = serializers.CharField()
    utilization_pct = serializers.FloatField(allow_null=True)
    memory_used_mb = serializers.IntegerField(allow_null=True)
    temperature_c = serializers.FloatField(allow_null=True)
    power_w = serializers.FloatField(allow_null=True)
    # Optional (older agents leave them out); kept in Gpu.metrics as sent.
    power_limit_w = serializers.FloatField(required=False, allow_null=True)
    fan_pct = serializers.FloatField(required=False, allow_null=True)
    pcie_tx_kbps = serializers.IntegerField(required=False, allow_null=True, min_value=0)
    pcie_rx_kbps = serializers.IntegerField(required=False, allow_null=True, min_value=0)
    ecc_corrected_volatile = serializers.IntegerField(required=False, allow_null=True, min_value=0)
    ecc_uncorrected_volatile = serializers.IntegerField(
        required=False, allow_null=True, min_value=0
    )
    xid_errors = serializers.ListField(
        child=serializers.IntegerField(),
        required=False,
        allow_null=True,
        max_length=XID_ERRORS_MAX,
    )


class HeartbeatSerializer(serializers.Serializer):
    gpus = GpuMetricsSerializer(many=True)
    running_sessions = serializers.ListField(child=serializers.IntegerField())


class ReportSerializer(serializers.Serializer):
    state = serializers.ChoiceField(choices=["STARTING", "RUNNING", "FAILED", "LOST", "ENDED"])
    host = serializers.CharField(required=False, allow_blank=True)
    port = serializers.IntegerField(required=False, allow_null=True, min_value=1, max_value=65535)
    container_id = serializers.CharField(required=False, allow_blank=True)
    reason = serializers.CharField(required=False, allow_blank=True, max_length=REASON_MAX_CHARS)
    placement = serializers.CharField(required=False, allow_blank=True, max_length=40)


class WarmReportSerializer(serializers.Serializer):
    state = serializers.ChoiceField(choices=["READY", "FAILED"])
    reason = serializers.CharField(required=False, allow_blank=True, max_length=REASON_MAX_CHARS)
    port = serializers.IntegerField(required=False, allow_null=True, min_value=1, max_value=65535)
    container_id = serializers.CharField(required=False, allow_blank=True, max_length=100)


class AgentView(APIView):
    authentication_classes = [NodeTokenAuthentication]
    permission_classes = [IsNode]

    @property
    def node(self) -> Node:
        return self.request.auth


class RegisterView(AgentView):
    permission_classes = [permissions.AllowAny]

    @extend_schema(request=RegistrationSerializer, responses={200: dict, 201: dict})
    def post(self, request: Request) -> Response:
        body = RegistrationSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        known = request.auth if isinstance(request.auth, Node) else None
        try:
            node, plain_token = do_register(body.validated_data, known)
        except ServiceError as error:
            if error.code == "auth":
                raise exceptions.AuthenticationFailed(error.message) from error
            raise as_api_error(error) from error
        from django.conf import settings

        answer = {
            "node_id": node.pk,
            "heartbeat_interval_s": settings.AGENT_HEARTBEAT_INTERVAL_S,
            "poll_interval_s": settings.AGENT_POLL_INTERVAL_S,
        }
        if plain_token:
            answer["node_token"] = plain_token
        return Response(answer, status=status.HTTP_201_CREATED if plain_token else 200)


class HeartbeatView(AgentView):
    @extend_schema(request=HeartbeatSerializer, responses={200: dict})
    def post(self, request: Request) -> Response:
        body = HeartbeatSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        do_heartbeat(self.node, body.validated_data)
        return Response({"ok": True, "server_time": timezone.now().isoformat()})


class DesiredView(AgentView):
    @extend_schema(responses={200: dict})
    def get(self, request: Request) -> Response:
        # ``warm``: desktops to keep started for class bookings (an older agent ignores it).
        return Response({"sessions": desired_sessions(self.node), "warm": desired_warm(self.node)})


class ReportView(AgentView):
    @extend_schema(request=ReportSerializer, responses={200: dict, 409: dict})
    def post(self, request: Request, session_id: int) -> Response:
        body = ReportSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            session = do_report(self.node, session_id, body.validated_data)
        except ServiceError as error:
            api_error = as_api_error(error)
            if api_error.status_code == status.HTTP_409_CONFLICT:
                # A conflict is only ever about a session this node holds or once held.
                current = Session.objects.filter(pk=session_id).values_list("state", flat=True)
                return Response(
                    {"detail": error.message, "state": current.first()},
                    status=status.HTTP_409_CONFLICT,
                )
            raise api_error from error
        return Response({"state": session.state})


class WarmReportView(AgentView):
    @extend_schema(request=WarmReportSerializer, responses={200: dict, 409: dict})
    def post(self, request: Request, key: str) -> Response:
        body = WarmReportSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            warm = do_warm_report(self.node, key, body.validated_data)
        except ServiceError as error:
            api_error = as_api_error(error)
            if api_error.status_code == status.HTTP_409_CONFLICT:
                return Response(
                    {"detail": error.message, "state": None}, status=status.HTTP_409_CONFLICT
                )
            raise api_error from error
        return Response({"state": warm.state})


urlpatterns = [
    path("register/", RegisterView.as_view(), name="agent-register"),
    path("heartbeat/", HeartbeatView.as_view(), name="agent-heartbeat"),
    path("desired/", DesiredView.as_view(), name="agent-desired"),
    path("sessions/<int:session_id>/report/", ReportView.as_view(), name="agent-report"),
    re_path(
        WARM_KEY_PATTERN.replace("^", r"^warm/(?P<key>", 1).replace("$", r")/report/$"),
        WarmReportView.as_view(),
        name="agent-warm-report",
    ),
]
