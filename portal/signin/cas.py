"""CAS sign-in (docs/signin.md): the backend, its URLs, and the identity provider's logout.

django-cas-ng sends the browser to the CAS server and back with a service ticket;
:class:`CampusCASBackend` has the ticket validated (CAS 3.0, ``p3/serviceValidate``) and hands
the user name and the released attributes to :func:`sync_person`, the one place that creates
and updates accounts. A refused sign-in, an invalid ticket or a CAS server that cannot be
reached lands on ``/login/`` with a message, never on an error page.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any
from xml.etree.ElementTree import ParseError

import requests
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest
from django.shortcuts import redirect
from django.urls import URLPattern, path, reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.translation import gettext as _
from django_cas_ng import views as cas_views
from django_cas_ng.backends import CASBackend
from django_cas_ng.models import SessionTicket
from django_cas_ng.utils import RedirectException, get_cas_client

from portal.signin.cas_config import DEFAULT_ATTRIBUTES, DEFAULT_TIMEOUT_S
from portal.signin.identity import (
    CampusIdentity,
    SigninRefused,
    refusal_of,
    refuse,
    sync_person,
)

logger = logging.getLogger(__name__)

# The request attribute on which the backend leaves why it refused a sign-in: Django's
# authenticate() swallows the PermissionDenied, the login view shows this instead.

Attributes = Mapping[str, Any]


class _TimeoutSession(requests.Session):
    """The HTTP session that validates tickets: it gives up after SIGNIN_CAS_TIMEOUT_S and
    verifies the CAS server's certificate against SIGNIN_CAS_CA_FILE when one is set."""

    def request(self, method, url, *args, **kwargs):  # type: ignore[no-untyped-def, override]
        kwargs.setdefault("timeout", getattr(settings, "SIGNIN_CAS_TIMEOUT_S", DEFAULT_TIMEOUT_S))
        ca_file = getattr(settings, "SIGNIN_CAS_CA_FILE", "")
        if ca_file and kwargs.get("verify", True) is True:
            kwargs["verify"] = ca_file
        return super().request(method, url, *args, **kwargs)


def _values(attributes: Attributes, name: str) -> list[str]:
    """The values of a released attribute: CAS 3.0 gives a string for one, a list for more."""
    value = attributes.get(name) if name else None
    if value is None:
        return []
    items = value if isinstance(value, list | tuple) else [value]
    return [str(item).strip() for item in items if item is not None and str(item).strip()]


def _first(attributes: Attributes, name: str) -> str:
    values = _values(attributes, name)
    return values[0] if values else ""


def identity_from(cas_user: str, attributes: Attributes) -> CampusIdentity:
    """The campus identity in a validated ticket, through the SIGNIN_CAS_ATTRIBUTES names."""
    names = getattr(settings, "SIGNIN_CAS_ATTRIBUTES", DEFAULT_ATTRIBUTES)
    username = _first(attributes, names["username"]) if names["username"] else cas_user
    return CampusIdentity(
        username=username,
        email=_first(attributes, names["email"]),
        first_name=_first(attributes, names["first_name"]),
        last_name=_first(attributes, names["last_name"]),
        groups=tuple(_values(attributes, names["groups"])),
        department=_first(attributes, names["department"]),
        source="cas",
    )


class CampusCASBackend(CASBackend):
    """Validates the service ticket, then creates or updates the account through
    sync_person with the released attributes; never creates users by itself."""

    def authenticate(  # type: ignore[override]
        self, request: HttpRequest | None, ticket: str, service: str
    ) -> User | None:
        client = get_cas_client(service_url=service, request=request)
        client.session = _TimeoutSession()
        try:
            cas_user, attributes, _pgtiou = client.verify_ticket(ticket)
        except (
            requests.RequestException,
            ParseError,
            IndexError,
            AttributeError,
            ValueError,
        ) as error:
            # The class only: the message of a request error holds the URL, ticket and all.
            logger.warning(
                "CAS ticket validation at %s failed: %s",
                client.server_url,
                error.__class__.__name__,
            )
            raise refuse(
                request,
                _("The campus CAS could not be reached to confirm your sign-in. Try again."),
            ) from error
        if not cas_user:
            raise refuse(
                request,
                _(
                    "The campus CAS did not confirm this sign-in (the ticket is invalid or has "
                    "expired). Try again."
                ),
            )
        try:
            return sync_person(identity_from(cas_user, attributes or {}))
        except SigninRefused as refused:
            logger.info("CAS sign-in of %r refused: %s", cas_user, refused)
            raise refuse(request, str(refused)) from refused


def _next_is_local(request: HttpRequest) -> bool:
    next_page = request.GET.get("next") or request.POST.get("next") or ""
    return not next_page or url_has_allowed_host_and_scheme(
        next_page, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    )


def _bad_next() -> HttpResponse:
    return HttpResponseBadRequest(_("The address to go to after sign-in is not on this portal."))


def _single_logout(request: HttpRequest) -> HttpResponse:
    """The CAS server's single logout POST: end the portal session of that ticket."""
    try:
        session_indexes = get_cas_client(request=request).get_saml_slos(
            request.POST["logoutRequest"]
        )
    except ValueError:
        session_indexes = None
    if session_indexes is None:
        return HttpResponseBadRequest(_("This is not a CAS logout request."))
    cas_views.clean_sessions(get_cas_client(request=request), request)
    return HttpResponse("ok\n", content_type="text/plain")


class LoginView(cas_views.LoginView):
    """django-cas-ng's login (to the CAS server, and back with the ticket), with ?next=
    checked and every refusal shown on /login/."""

    def get(self, request: HttpRequest) -> HttpResponse:
        if not _next_is_local(request):
            return _bad_next()
        try:
            return super().get(request)
        except PermissionDenied:
            message = refusal_of(request) or _("The campus sign-in failed. Try again.")
            messages.error(request, message)
            return redirect("login")

    def post(self, request: HttpRequest) -> HttpResponse:
        if request.POST.get("logoutRequest"):
            return _single_logout(request)
        if not _next_is_local(request):
            return _bad_next()
        try:
            return super().post(request)
        except RedirectException:
            return _bad_next()


class CallbackView(cas_views.CallbackView):
    """The CAS server's single logout requests; proxy-granting tickets only when both of
    their parameters come."""

    def post(self, request: HttpRequest) -> HttpResponse:
        if not request.POST.get("logoutRequest"):
            return HttpResponseBadRequest(_("This is not a CAS logout request."))
        return _single_logout(request)

    def get(self, request: HttpRequest) -> HttpResponse:
        if not (request.GET.get("pgtId") and request.GET.get("pgtIou")):
            return HttpResponseBadRequest(_("This is not a CAS proxy callback."))
        return super().get(request)


urlpatterns: list[URLPattern] = (
    [
        path("signin/cas/login/", LoginView.as_view(), name="signin-cas"),
        path("signin/cas/callback/", CallbackView.as_view(), name="signin-cas-callback"),
    ]
    if "cas" in getattr(settings, "SIGNIN_BACKENDS", [])
    else []
)


def idp_logout_url(request: HttpRequest) -> str | None:
    """Where to send the browser after the portal's logout to end the IdP's session too
    (read before the portal's session is flushed), or None.

    The CAS server's /logout, which sends the browser back to the portal's /login/. The
    single logout record of this session goes, as the session does."""
    if not getattr(settings, "CAS_SERVER_URL", None):
        return None
    if request.session.session_key:
        SessionTicket.objects.filter(session_key=request.session.session_key).delete()
    back = reverse("login")
    root = getattr(settings, "CAS_ROOT_PROXIED_AS", "")
    back_url = root.rstrip("/") + back if root else request.build_absolute_uri(back)
    return str(get_cas_client(request=request).get_logout_url(back_url))
