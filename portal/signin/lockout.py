"""Sign-in throttling and lockout with django-axes (docs/security.md).

Every way in with a user name and password goes through ``django.contrib.auth.authenticate``
with the request: the login page (local and LDAP accounts), the Django admin's login and the
API's token endpoint (portal.api.tokens). ``LockoutBackend``, first in
``AUTHENTICATION_BACKENDS``, refuses a user name and address pair that failed
``AXES_FAILURE_LIMIT`` times, for ``AXES_COOLOFF_TIME``, even with the right password; the
pair, not the address alone, so one campus NAT does not lock a building out. Failures spread
over many user names are caught by a second, higher limit per address
(``SIGNIN_ADDRESS_FAILURE_LIMIT`` failures within the cool-off, any names, counted from
Axes' own records): that address is refused for the cool-off. The refusal is answered by
``lockout_response``: 429 with ``Retry-After``, JSON for the API, a page for a browser,
saying when to try again. Each lockout is audited once.
"""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Any

from axes.backends import AxesStandaloneBackend
from axes.exceptions import AxesBackendPermissionDenied
from axes.helpers import get_cool_off, get_failure_limit
from axes.models import AccessAttempt
from django.conf import settings
from django.db.models import Max, Sum
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.utils import timezone
from django.utils.formats import time_format
from django.utils.translation import ngettext

from scheduling.choices import AuditKind
from scheduling.services.audit import record

API_PREFIX = "/api/"
SIGNIN_ACTOR = "signin:lockout"


class LockoutBackend(AxesStandaloneBackend):
    """Axes' check, which needs the request to know the client's address. Without a request
    nobody is signing in from a client (Django's test ``Client.login``, a management command):
    there is no pair to count or refuse, and the next backends decide alone."""

    def authenticate(  # type: ignore[override]
        self,
        request: HttpRequest | None,
        username: str | None = None,
        password: str | None = None,
        **kwargs: Any,
    ) -> None:
        if request is None:
            return None
        super().authenticate(request, username, password, **kwargs)
        if settings.AXES_ENABLED and not without_a_user_name(request, {"username": username}):
            _check_address(request)
        return None


def _check_address(request: HttpRequest) -> None:
    """Refuse an address with ``SIGNIN_ADDRESS_FAILURE_LIMIT`` failed sign-ins within the
    cool-off, whatever names they tried (0: no such limit). Refused attempts count on, as
    Axes counts a locked-out pair's, so the cool-off runs from the last one."""
    limit = settings.SIGNIN_ADDRESS_FAILURE_LIMIT
    address = getattr(request, "axes_ip_address", None)
    cool_off = get_cool_off(request)
    if limit <= 0 or not address or cool_off is None:
        return
    now = timezone.now()
    seen = AccessAttempt.objects.filter(
        ip_address=address, attempt_time__gte=now - cool_off
    ).aggregate(failures=Sum("failures_since_start"), last=Max("attempt_time"))
    failures = seen["failures"] or 0
    if failures < limit:
        return
    if failures == limit:  # the first refusal: audited once
        record(
            AuditKind.SIGNIN_LOCKED_OUT,
            SIGNIN_ACTOR,
            data={"scope": "address", "path": request.path, "failures": failures},
        )
    request.address_locked_for = max(seen["last"] + cool_off - now, timedelta(seconds=1))  # type: ignore[attr-defined]
    request.axes_locked_out = True  # type: ignore[attr-defined]
    raise AxesBackendPermissionDenied("too many failed sign-ins from this address")


def username_of(request: HttpRequest, credentials: dict[str, Any] | None) -> str | None:
    """The user name tried, as the directory compares it: ``Ada`` and ``ada `` are one name
    to LDAP, so they share one count of failures."""
    name = credentials.get("username") if credentials else request.POST.get("username")
    return name.strip().casefold() if isinstance(name, str) else None


def without_a_user_name(request: HttpRequest, credentials: dict[str, Any] | None) -> bool:
    """OIDC and CAS sign-ins (a code or a ticket, no user name): not counted here, or one
    address's stale callbacks would lock out everyone behind it; the IdP throttles them."""
    return not username_of(request, credentials)


def lockout_message(cool_off: timedelta, *, address: bool = False) -> str:
    minutes = max(1, math.ceil(cool_off.total_seconds() / 60))
    until = time_format(timezone.localtime(timezone.now() + cool_off), "TIME_FORMAT")
    if address:
        return ngettext(
            "Too many failed sign-ins from your address. "
            "Try again in %(minutes)d minute, after %(time)s.",
            "Too many failed sign-ins from your address. "
            "Try again in %(minutes)d minutes, after %(time)s.",
            minutes,
        ) % {"minutes": minutes, "time": until}
    return ngettext(
        "Too many failed sign-ins with this user name from your address. "
        "Try again in %(minutes)d minute, after %(time)s.",
        "Too many failed sign-ins with this user name from your address. "
        "Try again in %(minutes)d minutes, after %(time)s.",
        minutes,
    ) % {"minutes": minutes, "time": until}


def _audit(request: HttpRequest, credentials: dict[str, Any] | None) -> None:
    """Once per lockout: on the failure that reached the limit (a failure while locked
    counts on, and starts the cool-off again, without a new event)."""
    failures = getattr(request, "axes_failures_since_start", None)
    if failures != get_failure_limit(request, credentials):
        return
    name = username_of(request, credentials) or ""
    # Not "user:<name>": whoever tried that name is not known to be its owner.
    record(
        AuditKind.SIGNIN_LOCKED_OUT,
        SIGNIN_ACTOR,
        data={"username": name, "path": request.path, "failures": failures},
    )


def lockout_response(
    request: HttpRequest,
    original_response: HttpResponse | None = None,
    credentials: dict[str, Any] | None = None,
) -> HttpResponse:
    """Axes' ``AXES_LOCKOUT_CALLABLE``: what a refused sign-in gets instead of the view's
    answer."""
    address_cool_off = getattr(request, "address_locked_for", None)
    if address_cool_off is None:
        _audit(request, credentials)
        cool_off = get_cool_off(request) or timedelta(0)
    else:
        cool_off = address_cool_off
    retry_after = max(1, math.ceil(cool_off.total_seconds()))
    message = lockout_message(cool_off, address=address_cool_off is not None)
    response: HttpResponse
    if request.path.startswith(API_PREFIX):
        response = JsonResponse({"detail": message, "retry_after": retry_after}, status=429)
    else:
        response = render(request, "registration/locked_out.html", {"message": message}, status=429)
    response["Retry-After"] = str(retry_after)
    return response
