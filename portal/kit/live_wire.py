"""The live sockets' wire on every page: close codes and paths, for live_socket.js.

Registered once as a context processor (``portal.settings``); ``templates/base.html`` renders
it as ``#live-wire``, so every page whose script opens a socket reads the one definition
(:mod:`nodeagent.gateway.codes`) that the gateway and the portal's consumers close with.
"""

from __future__ import annotations

from django.http import HttpRequest

from nodeagent.gateway import codes


def live_wire(request: HttpRequest) -> dict[str, object]:
    """``live_wire``: what a page's script needs to open, and to stop, its sockets."""
    return {"live_wire": codes.live_wire()}
