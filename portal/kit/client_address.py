"""Who is on the other end of a request: the client's address, as the audit trail, sign-in
lockout and a gateway ticket's issuing record it (docs/audit.md). A desktop's open is audited
with the browser's address as the node's gateway saw it (scheduling/services/gateway_events.py)."""

from __future__ import annotations

import ipaddress

from django.conf import settings
from django.http import HttpRequest


def _valid(address: str) -> str | None:
    try:
        return str(ipaddress.ip_address(address.strip()))
    except ValueError:
        return None


def client_address_of(request: HttpRequest) -> str | None:
    """The connection's address; behind ``settings.TRUSTED_PROXIES`` reverse proxies, the
    address the outermost of them saw, from the right of X-Forwarded-For (each proxy appends
    the address it was connected from: entries further left are the client's to forge)."""
    remote = _valid(request.META.get("REMOTE_ADDR", ""))
    proxies = settings.TRUSTED_PROXIES
    forwarded = request.META.get("HTTP_X_FORWARDED_FOR", "")
    if proxies <= 0 or not forwarded:
        return remote
    hops = [hop for hop in forwarded.split(",") if hop.strip()]
    if len(hops) < proxies:
        return remote
    return _valid(hops[-proxies]) or remote
