"""Overload is answered 503 with Retry-After, never 500 (docs/deploy.md).

The database pool of a process is bounded (``DESKPOOL_DB_POOL_MAX``): when every connection
stays busy past the pool's timeout, or PostgreSQL itself refuses a connection, Django raises
``OperationalError``. Raised in a view, :class:`OverloadMiddleware` (outermost) answers it; raised
in another middleware (the session or the signed-in user read from the database), Django calls
the 500 handler, and :func:`server_error` answers it the same way. Nothing was half-created:
each request's writes are one transaction, rolled back with the error.

The answer does not touch the database: a JSON body under ``/api/``, a small page elsewhere.
One warning line is logged per answer, without a traceback.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable

from django.conf import settings
from django.db import OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template.loader import render_to_string
from django.utils.translation import gettext as _
from django.views import defaults

log = logging.getLogger(__name__)


def busy_response(request: HttpRequest, error: BaseException) -> HttpResponse:
    """503 with Retry-After for a request the database could not serve now."""
    retry_after = settings.OVERLOAD_RETRY_AFTER_S
    log.warning("overloaded, answered 503 to %s %s: %s", request.method, request.path, error)
    message = _("Deskpool is very busy right now. Nothing was changed; try again in %(s)s s.") % {
        "s": retry_after
    }
    response: HttpResponse
    if request.path.startswith("/api/"):
        response = JsonResponse({"detail": message, "retry_after": retry_after}, status=503)
    else:
        page = render_to_string("503.html", {"message": message, "retry_after": retry_after})
        response = HttpResponse(page, status=503)
    response["Retry-After"] = str(retry_after)
    response["Cache-Control"] = "no-store"
    response.overload = True  # type: ignore[attr-defined]  # QuietOverload drops its log
    return response


class OverloadMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if isinstance(exception, OperationalError):
            return busy_response(request, exception)
        return None


def server_error(request: HttpRequest) -> HttpResponse:
    """``handler500``: overload raised outside a view is a 503 too; anything else, Django's."""
    error = sys.exc_info()[1]
    if isinstance(error, OperationalError):
        return busy_response(request, error)
    return defaults.server_error(request)


class QuietOverload(logging.Filter):
    """On ``django.request``: drop the error record (with its traceback) Django writes for a
    503 answered here; :func:`busy_response` has logged one warning line instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        response = getattr(record, "response", None)
        return not getattr(response, "overload", False)
