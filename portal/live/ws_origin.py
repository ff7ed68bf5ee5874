"""WebSocket handshakes only from the portal's own pages: the Origin header must match the
scheme, host and port the browser used to reach the portal, or one of CSRF_TRUSTED_ORIGINS
(docs/security.md "Production settings").

Channels' AllowedHostsOriginValidator compares the host only: a page served from
``http://portal.campus:8080`` (another service on the same host, or plain HTTP next to
HTTPS) would pass it. Here the portal's own origin is read from the handshake: the scheme
(``wss`` is https; behind nginx the forwarded scheme when SECURE_PROXY_SSL_HEADER is set) and
the Host header, port included. A handshake with no Origin (not a browser) is refused too.
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import urlsplit

from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.http.request import split_domain_port, validate_host

DEFAULT_PORTS = {"http": "80", "https": "443"}


def _header(scope: dict, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            try:
                return value.decode("latin-1")
            except UnicodeDecodeError:  # pragma: no cover - latin-1 decodes any byte
                return None
    return None


def _normal(scheme: str, host: str) -> tuple[str, str, str] | None:
    """(scheme, host, port) with the default port filled in, or None when malformed."""
    domain, port = split_domain_port(host.lower())
    if not domain or scheme not in DEFAULT_PORTS:
        return None
    return scheme, domain, port or DEFAULT_PORTS[scheme]


def _origin_of(value: str) -> tuple[str, str, str] | None:
    try:
        parts = urlsplit(value.strip())
        if parts.path not in ("", "/") or parts.query or parts.username or parts.password:
            return None
        return _normal(parts.scheme.lower(), parts.netloc)
    except ValueError:
        return None


def portal_origin(scope: dict) -> tuple[str, str, str] | None:
    """The origin the browser reached the portal at, as this handshake shows it."""
    host = _header(scope, b"host")
    if not host:
        return None
    scheme = "https" if scope.get("scheme") == "wss" else "http"
    proxy = getattr(settings, "SECURE_PROXY_SSL_HEADER", None)
    if proxy:
        header, secure_value = proxy
        name = header.removeprefix("HTTP_").lower().replace("_", "-").encode()
        forwarded = _header(scope, name)
        if forwarded is not None:
            scheme = "https" if forwarded.split(",")[0].strip() == secure_value else "http"
    domain, _port = split_domain_port(host.lower())
    if not validate_host(domain, settings.ALLOWED_HOSTS):
        return None
    return _normal(scheme, host)


def origin_allowed(scope: dict, trusted: Iterable[str] = ()) -> bool:
    origin_header = _header(scope, b"origin")
    origin = _origin_of(origin_header) if origin_header else None
    if origin is None:
        return False
    if origin == portal_origin(scope):
        return True
    return any(origin == _origin_of(other) for other in trusted)


class SameOriginWebSockets:
    """ASGI middleware: deny a WebSocket handshake whose Origin is not the portal's own."""

    def __init__(self, application):
        self.application = application

    async def __call__(self, scope, receive, send):
        if scope["type"] == "websocket" and not origin_allowed(
            scope, settings.CSRF_TRUSTED_ORIGINS
        ):
            return await WebsocketDenier()(scope, receive, send)
        return await self.application(scope, receive, send)
