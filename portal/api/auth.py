"""API authentication: Deskpool's own tokens, in the person's language.

``Authorization: Token <token>`` names one of the person's API tokens
(scheduling.services.api_tokens):
an unknown, revoked or expired token, or one of a disabled account, is refused with 401 and
a message saying which. DRF authenticates a token inside the view, after
``PreferencesMiddleware`` has run for an anonymous request; this class applies the person's
saved language and time zone once the token names them, so token clients get the same
answers as the pages (docs/i18n.md).
"""

from __future__ import annotations

from typing import Any

from rest_framework.authentication import TokenAuthentication
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.request import Request

from people.preferences import apply_preferences
from scheduling.services.api_tokens import TokenRefused, check_token


class PreferencesTokenAuthentication(TokenAuthentication):
    def authenticate_credentials(self, key: str) -> tuple[Any, Any]:
        try:
            token = check_token(key)
        except TokenRefused as refused:
            raise AuthenticationFailed(str(refused)) from None
        return token.user, token

    def authenticate(self, request: Request):
        identity = super().authenticate(request)
        if identity is not None:
            apply_preferences(request._request, identity[0])
        return identity
