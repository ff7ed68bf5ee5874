"""API authentication that speaks the person's language.

DRF authenticates a token inside the view, after ``PreferencesMiddleware`` has run for an
anonymous request; this class applies the person's saved language and time zone once the
token names them, so token clients get the same answers as the pages (docs/i18n.md).
"""

from __future__ import annotations

from rest_framework.authentication import TokenAuthentication
from rest_framework.request import Request

from portal.preferences import apply_preferences


class PreferencesTokenAuthentication(TokenAuthentication):
    def authenticate(self, request: Request):
        identity = super().authenticate(request)
        if identity is not None:
            apply_preferences(request._request, identity[0])
        return identity
