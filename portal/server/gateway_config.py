"""The desktop gateway's settings (issue 34; docs/deploy.md, the desktop gateway): where a page
opens a node's gateway, and which page origins a gateway lets in.

``DESKPOOL_GATEWAY_URL`` is a template: ``{address}`` and ``{port}`` are filled with the
node's checked management address and its gateway's port. The default, ``ws://{address}:{port}``,
is for ``make demo`` and the tests (the browser reaches the local gateways directly); in
production nginx routes the browser, e.g. ``wss://deskpool.example.edu/gw/{address}/{port}``.

``DESKPOOL_GATEWAY_ORIGINS``: comma-separated ``scheme://host[:port]``. The portal's own
WebSockets accept the origin the browser reached the portal at (read from each handshake,
``portal.live.ws_origin``), which a node cannot know ahead; so by default the gateways get
what can be known from the settings: CSRF_TRUSTED_ORIGINS, and for each plain name in
ALLOWED_HOSTS ``https://<name>`` behind a TLS proxy, else ``http://<name>:<PORT>`` (PORT as
``make demo`` reads it, default 8000).
"""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import urlsplit

from django.core.exceptions import ImproperlyConfigured

ORIGINS_MAX = 8  # nodeagent.protocol_gateway.GATEWAY_ORIGINS_MAX


def gateway_url(template: str) -> str:
    """The URL template, checked: ws or wss, with both placeholders."""
    scheme = template.split("://", 1)[0]
    if scheme not in ("ws", "wss") or "{address}" not in template or "{port}" not in template:
        raise ImproperlyConfigured(
            "DESKPOOL_GATEWAY_URL must be a ws:// or wss:// URL with {address} and {port}, "
            "such as ws://{address}:{port} or wss://deskpool.example.edu/gw/{address}/{port}"
        )
    try:
        template.format(address="10.0.0.1", port=1)
    except (KeyError, IndexError, ValueError):
        raise ImproperlyConfigured(
            "DESKPOOL_GATEWAY_URL may name {address} and {port}, nothing else in braces"
        ) from None
    return template


def _origin(value: str) -> str:
    parts = urlsplit(value.strip())
    if (
        parts.scheme not in ("http", "https")
        or not parts.hostname
        or parts.path not in ("", "/")
        or parts.query
        or parts.username
    ):
        raise ImproperlyConfigured(
            f"DESKPOOL_GATEWAY_ORIGINS: {value!r} is not an origin such as "
            "https://deskpool.example.edu or http://127.0.0.1:8000"
        )
    return f"{parts.scheme}://{parts.netloc.lower()}"


def gateway_origins(
    named: Sequence[str],
    *,
    trusted: Sequence[str],
    allowed_hosts: Sequence[str],
    behind_tls_proxy: bool,
    port: int,
) -> list[str]:
    """The origins to send the gateways: ``named`` if any, else the default (module doc)."""
    if named:
        origins = list(dict.fromkeys(_origin(value) for value in named if value.strip()))
        if len(origins) > ORIGINS_MAX:
            raise ImproperlyConfigured(
                f"DESKPOOL_GATEWAY_ORIGINS names {len(origins)} origins; at most {ORIGINS_MAX}"
            )
        return origins
    plain = [host for host in allowed_hosts if host and host != "*" and not host.startswith(".")]
    own = [f"https://{host}" if behind_tls_proxy else f"http://{host}:{port}" for host in plain]
    found = []
    for value in [*trusted, *own]:
        try:
            found.append(_origin(value))
        except ImproperlyConfigured:
            continue  # a CSRF origin with a wildcard: not one a gateway can compare
    return list(dict.fromkeys(found))[:ORIGINS_MAX]
