"""The agent API's gateway call (issue 34; nodeagent/protocol_gateway.py), node-token
authenticated like the rest of ``/api/agent/v1/``:

``POST gateway-events/``
    :class:`GatewayEventBatch` -> :class:`GatewayEventsAnswer`: what the node's gateway
    opened, counted and closed. Events about tickets of another node, or unknown ones, are
    ignored and not counted in ``recorded``. The logic is in
    ``scheduling.services.gateway_events``.
"""

from __future__ import annotations

from django.urls import path
from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from nodeagent.protocol_gateway import GatewayEventBatch, GatewayEventsAnswer
from scheduling.services.gateway_events import do_gateway_events

from .api import ERRORS, AgentView, answer, read_message


class GatewayEventsView(AgentView):
    @extend_schema(request=GatewayEventBatch, responses={200: GatewayEventsAnswer, **ERRORS})
    def post(self, request: Request) -> Response:
        body = read_message(request, GatewayEventBatch)
        return answer(GatewayEventsAnswer(recorded=do_gateway_events(self.node, body.events)))


urlpatterns = [
    path("gateway-events/", GatewayEventsView.as_view(), name="agent-gateway-events"),
]
