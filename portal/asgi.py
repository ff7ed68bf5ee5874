"""ASGI entry point: HTTP through Django, WebSockets through Channels, on one server."""

from __future__ import annotations

import os
from typing import Any

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

import django  # noqa: E402
from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.conf import settings  # noqa: E402
from django.urls import get_resolver  # noqa: E402

from portal.server.http_gate import HttpGate  # noqa: E402

django.setup(set_prefix=False)  # as django.core.asgi.get_asgi_application does

from portal.server.sync_handler import OneThreadASGIHandler  # noqa: E402

# People's requests enter Django a few at a time, the agents' at once (portal.server.http_gate);
# each request's middleware and view run in one thread (portal.server.sync_handler).
http_application: Any = HttpGate(OneThreadASGIHandler(), settings.HTTP_CONCURRENCY)
if settings.SERVE_STATIC:
    from portal.server.input_limits import StaticFiles  # a path out of the static folders is a 404

    http_application = StaticFiles(http_application)  # type: ignore[arg-type]  # any ASGI app

from portal.agents import wait as agent_wait  # noqa: E402
from portal.live.routing import websocket_urlpatterns  # noqa: E402
from portal.live.ws_origin import SameOriginWebSockets  # noqa: E402
from portal.server.heap import settle_for_serving  # noqa: E402


async def http(scope, receive, send) -> None:
    """The agents' long-poll is answered beside Django, holding no thread while it waits."""
    if scope["path"] == agent_wait.PATH:
        await agent_wait.agent_wait(scope, receive, send)
    else:
        await http_application(scope, receive, send)


application = ProtocolTypeRouter(
    {
        "http": http,
        # Only the portal's own pages: Origin matches scheme, host and port (portal.live.ws_origin).
        "websocket": SameOriginWebSockets(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
    }
)

# The views' modules are imported now rather than by the first request; then what start-up
# made is left out of later garbage collections, which run less often (portal.server.heap).
get_resolver().url_patterns  # noqa: B018
settle_for_serving()
