"""Bad input is answered with a clear 400 or 404 before it can raise (docs/security.md,
"Bad input"): what this module bounds, each at the layer every request passes through.

- :class:`JsonDepthLimit` (middleware): a JSON body nested deeper than
  :data:`MAX_JSON_DEPTH` levels is a 400 before any view or parser sees it; Python's ``json``
  would otherwise recurse until a RecursionError (a 500). Every JSON endpoint of the portal
  is behind it: the user API, the token endpoint, the agent API. The agents' long-poll
  (``portal.agents.wait``) parses with pydantic, which refuses deep nesting itself (400).
- :class:`StaticFiles`: a path under ``/static/`` that leaves the static folders
  (``..``, encoded or not) or holds a NUL is a 404, not a SuspiciousFileOperation (a 500 and
  a traceback under daphne).
- :func:`not_found` (``handler404``): a path under ``/api/`` that matches no route (an id
  that is not a number) is a JSON 404 like the API's other errors.
- WebSocket frames: the live-update sockets only send and drop what a client sends
  (``portal.live.listen_only``); a desktop's bytes go through the node's gateway, which
  bounds its messages (``nodeagent.gateway.carrying``).

Ids and numbers are bounded where they are read: ``portal.kit.form_fields`` for forms (ASCII
digits, within the database's integer range), the serializers and ``portal.api.errors``
for the APIs.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable

from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler
from django.core.exceptions import RequestDataTooBig, SuspiciousFileOperation
from django.http import FileResponse, Http404, HttpRequest, HttpResponse, JsonResponse
from django.utils.translation import gettext as _
from django.views import defaults
from rest_framework.utils.mediatypes import media_type_matches

log = logging.getLogger(__name__)

MAX_JSON_DEPTH = 32  # the deepest body any endpoint takes nests 5 levels

# A JSON string (its brackets do not count), or one bracket.
_JSON_TOKENS = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]')
_OPENING = frozenset(b"[{")


def json_depth_over(body: bytes, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether ``body`` nests arrays and objects deeper than ``limit``, read without parsing
    it (no recursion, stops at the first level over the limit)."""
    depth = 0
    for token in _JSON_TOKENS.finditer(body):
        first = token.group()[0]
        if first in _OPENING:
            depth += 1
            if depth > limit:
                return True
        elif first != ord('"'):
            depth -= 1
    return False


def is_json(request: HttpRequest) -> bool:
    """Whether a JSON parser would read the body: DRF picks its parser by this same match,
    so ``application/*`` and ``*/*`` count too."""
    content_type = request.META.get("CONTENT_TYPE", "")
    return media_type_matches("application/json", content_type) or (
        request.content_type or ""
    ).endswith("+json")


class JsonDepthLimit:
    """400 for a JSON body nested too deep; 413 for one over DATA_UPLOAD_MAX_MEMORY_SIZE."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if is_json(request):
            try:
                body = request.body
            except RequestDataTooBig:
                detail = _("The request body is too large.")
                return JsonResponse({"detail": detail}, status=413)
            if json_depth_over(body):
                detail = _("The JSON body is nested deeper than %(limit)s levels.") % {
                    "limit": MAX_JSON_DEPTH
                }
                return JsonResponse({"detail": detail}, status=400)
        return self.get_response(request)


def not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    """``handler404``: under ``/api/`` a JSON answer like every other API error (an id that
    is not a number, a path that is not there), elsewhere Django's page."""
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": _("Not found.")}, status=404)
    return defaults.page_not_found(request, exception)


class StaticFiles(ASGIStaticFilesHandler):
    """Django's static files handler, with a path that is not a static file a 404."""

    def serve(self, request: HttpRequest) -> HttpResponse | FileResponse:
        try:
            return super().serve(request)
        except (SuspiciousFileOperation, ValueError):  # ``..`` out of the folder; a NUL
            raise Http404(_("No such file.")) from None
