"""OIDC sign-in (docs/signin.md): the backend, its URLs, and the identity provider's logout."""

from __future__ import annotations

from django.http import HttpRequest
from django.urls import URLPattern

urlpatterns: list[URLPattern] = []


def idp_logout_url(request: HttpRequest) -> str | None:
    """Where to send the browser after the portal's logout to end the IdP's session too
    (read before the portal's session is flushed), or None."""
    return None
