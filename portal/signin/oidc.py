"""OIDC sign-in (docs/signin.md): the backend, its URLs, and the identity provider's logout.

mozilla-django-oidc runs the authorization code flow: ``oidc/authenticate/`` (the "single
sign-on" link on ``/login/``) sends the browser to the provider, which sends it back to
``oidc/callback/`` with a code; the code is exchanged for tokens, the RS256 ID token is
checked against the provider's keys, and :class:`CampusOIDCBackend` hands the claims (the
ID token's and the userinfo endpoint's) to :func:`sync_person`, the one place that creates and
updates accounts. A refused sign-in, a failed flow or a provider that cannot be reached
lands on ``/login/`` with a message, never on an error page.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlencode

import jwt
import requests
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.models import User
from django.core.exceptions import SuspiciousOperation
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest
from django.shortcuts import redirect
from django.urls import URLPattern, path, reverse
from django.utils.translation import gettext as _
from mozilla_django_oidc.auth import OIDCAuthenticationBackend
from mozilla_django_oidc.views import (
    OIDCAuthenticationCallbackView,
    OIDCAuthenticationRequestView,
    get_next_url,
)

from portal.signin.identity import (
    CampusIdentity,
    SigninRefused,
    clean_username,
    refusal_of,
    refuse,
    sync_person,
)

logger = logging.getLogger(__name__)

# The request attribute on which the backend leaves why it refused a sign-in: Django's
# authenticate() swallows the PermissionDenied, the callback view shows this instead.

Claims = Mapping[str, Any]


def _values(claims: Claims, name: str) -> list[str]:
    """A claim's values: a JSON list, or one string (several separated by commas)."""
    value = claims.get(name) if name else None
    if value is None:
        return []
    items = value if isinstance(value, list | tuple) else str(value).split(",")
    return [str(item).strip() for item in items if item is not None and str(item).strip()]


def _first(claims: Claims, name: str) -> str:
    value = claims.get(name) if name else None
    if isinstance(value, list | tuple):
        value = value[0] if value else None
    return str(value).strip() if value is not None else ""


def identity_from(claims: Claims) -> CampusIdentity:
    """The campus identity in the claims, through the OIDC_CAMPUS_CLAIMS names; SigninRefused
    when they carry no usable user name."""
    names: dict[str, str] = getattr(settings, "OIDC_CAMPUS_CLAIMS", {})  # set while OIDC is on
    return CampusIdentity(
        username=clean_username(_first(claims, names["username"])),
        email=_first(claims, names["email"]),
        first_name=_first(claims, names["first_name"]),
        last_name=_first(claims, names["last_name"]),
        groups=tuple(_values(claims, names["groups"])),
        department=_first(claims, names["department"]),
        source="oidc",
    )


def _unconfirmed() -> str:
    return _("The campus single sign-on did not confirm this sign-in. Try again.")


class CampusOIDCBackend(OIDCAuthenticationBackend):
    """The code flow's last step: tokens, claims, then the account through sync_person, found
    by the user-name claim (never by e-mail); never creates users by itself."""

    def authenticate(self, request: HttpRequest | None, **kwargs: Any) -> User | None:  # type: ignore[override]
        # Only the callback view's call (nonce and PKCE verifier); never a password form's.
        if request is None or set(kwargs) - {"nonce", "code_verifier"}:
            return None
        try:
            return super().authenticate(request, **kwargs)  # type: ignore[no-any-return]
        except SigninRefused as refused:
            logger.info("OIDC sign-in refused: %s", refused)
            raise refuse(request, str(refused)) from refused
        except requests.HTTPError as error:  # the provider refused the code or the token
            logger.warning("OIDC provider refused: %s", str(error)[:300])
            raise refuse(request, _unconfirmed()) from error
        except requests.RequestException as error:
            logger.warning("OIDC provider request failed: %s", error.__class__.__name__)
            raise refuse(
                request,
                _(
                    "The campus single sign-on could not be reached to confirm your sign-in. "
                    "Try again."
                ),
            ) from error
        except (SuspiciousOperation, jwt.PyJWTError, ValueError, KeyError, TypeError) as error:
            logger.warning("OIDC sign-in not confirmed: %s: %s", error.__class__.__name__, error)
            raise refuse(request, _unconfirmed()) from error

    def verify_token(self, token: str, **kwargs: Any) -> dict[str, Any]:
        """The ID token's signature and nonce (mozilla-django-oidc), then its audience and,
        when DESKPOOL_OIDC_ISSUER is set, its issuer."""
        payload: dict[str, Any] = super().verify_token(token, **kwargs)
        audience = payload.get("aud")
        audiences = audience if isinstance(audience, list) else [audience]
        if self.OIDC_RP_CLIENT_ID not in audiences:
            raise SuspiciousOperation("the ID token is for another client")
        issuer = getattr(settings, "OIDC_OP_ISSUER", "")
        if issuer and payload.get("iss") != issuer:
            raise SuspiciousOperation("the ID token is from another issuer")
        return payload

    def get_userinfo(self, access_token: str, id_token: str, payload: dict[str, Any]) -> dict:
        """The ID token's claims with the userinfo endpoint's over them (some providers put
        groups in one only); both must be about the same subject."""
        userinfo = super().get_userinfo(access_token, id_token, payload)
        if not isinstance(userinfo, dict):
            raise SuspiciousOperation("the userinfo answer is not an object")
        if userinfo.get("sub") != payload.get("sub"):
            raise SuspiciousOperation("the userinfo is about another subject")
        return {**payload, **userinfo}

    def verify_claims(self, claims: Claims) -> bool:
        identity_from(claims)  # SigninRefused without a usable user name
        return True

    def filter_users_by_claims(self, claims: Claims):  # type: ignore[no-untyped-def]
        return self.UserModel.objects.filter(username=identity_from(claims).username)

    def create_user(self, claims: Claims) -> User:
        return sync_person(identity_from(claims))

    def update_user(self, user: User, claims: Claims) -> User:
        return sync_person(identity_from(claims), user)


def _failed(request: HttpRequest) -> HttpResponse:
    messages.error(request, refusal_of(request) or _unconfirmed())
    return redirect("login")


class SigninView(OIDCAuthenticationRequestView):
    """Starts the flow: to the provider, with ?next= (a page of this portal) kept."""

    def get(self, request: HttpRequest) -> HttpResponse:
        if request.GET.get("next") and get_next_url(request, "next") is None:
            return HttpResponseBadRequest(
                _("The address to go to after sign-in is not on this portal.")
            )
        return super().get(request)  # type: ignore[no-any-return]


class CallbackView(OIDCAuthenticationCallbackView):
    """The provider's redirect back: signed in, or on /login/ with the reason."""

    def get(self, request: HttpRequest) -> HttpResponse:
        try:
            return super().get(request)  # type: ignore[no-any-return]
        except SuspiciousOperation:  # a state this session never sent: old or forged
            logger.info("OIDC callback with an unknown state")
            return _failed(request)

    def login_failure(self) -> HttpResponse:
        error = self.request.GET.get("error", "")
        if error:  # the provider refused, or the person cancelled
            logger.info("OIDC provider answered %r", error[:100])
        return _failed(self.request)


urlpatterns: list[URLPattern] = (
    [
        path("oidc/authenticate/", SigninView.as_view(), name="signin-oidc"),
        # mozilla-django-oidc's own names, which it reverses.
        path("oidc/authenticate/", SigninView.as_view(), name="oidc_authentication_init"),
        path("oidc/callback/", CallbackView.as_view(), name="oidc_authentication_callback"),
    ]
    if "oidc" in settings.SIGNIN_BACKENDS
    else []
)


def idp_logout_url(request: HttpRequest) -> str | None:
    """Where to send the browser after the portal's logout to end the IdP's session too
    (read before the portal's session is flushed), or None.

    The provider's end-session endpoint (OIDC RP-Initiated Logout) with the session's ID token
    as id_token_hint, which sends the browser back to the portal's /login/."""
    # getattr: a session from before OIDC was switched off still logs out.
    endpoint = getattr(settings, "OIDC_OP_LOGOUT_ENDPOINT", "")
    if not endpoint:
        return None
    params = {
        "client_id": getattr(settings, "OIDC_RP_CLIENT_ID", ""),
        "post_logout_redirect_uri": request.build_absolute_uri(reverse("login")),
    }
    id_token = request.session.get("oidc_id_token")
    if id_token:
        params["id_token_hint"] = id_token
    return f"{endpoint}{'&' if '?' in endpoint else '?'}{urlencode(params)}"
