"""``/metrics``: the Prometheus text format, for a bearer token or an admin's login.

The numbers come from ``scheduling.services.metrics`` (docs/metrics.md). The token is
``DESKPOOL_METRICS_TOKEN`` (or ``_FILE``); it is compared in constant time and never logged.
"""

from __future__ import annotations

import hmac

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.utils.translation import gettext as _
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from scheduling.services.metrics import render_metrics

# The classic text format, which generate_latest writes and every Prometheus 2 parses.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def bearer_token(request: HttpRequest) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header; None without that header."""
    header = request.headers.get("Authorization", "")
    scheme, _sep, token = header.partition(" ")
    if not header:
        return None
    return token.strip() if scheme.lower() == "bearer" else ""


def token_matches(given: str, expected: str) -> bool:
    """Constant-time comparison; no token is configured: nothing matches."""
    return bool(expected) and hmac.compare_digest(given.encode(), expected.encode())


@never_cache
@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    given = bearer_token(request)
    if given is not None:
        allowed = token_matches(given, settings.METRICS_TOKEN)
    elif request.user.is_authenticated:
        allowed = request.user.is_staff
    else:
        response = HttpResponse(
            _("Send the metrics token as a bearer token, or sign in as an administrator."),
            status=401,
            content_type="text/plain; charset=utf-8",
        )
        response["WWW-Authenticate"] = 'Bearer realm="deskpool metrics"'
        return response
    if not allowed:
        return HttpResponse(
            _("This token or account may not read the metrics."),
            status=403,
            content_type="text/plain; charset=utf-8",
        )
    return HttpResponse(render_metrics(), content_type=CONTENT_TYPE)
