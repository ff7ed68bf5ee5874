"""Logout for every kind of sign-in: the portal's session ends, then the browser goes to the
identity provider's logout where its protocol has one (OIDC end-session, CAS logout)."""

from __future__ import annotations

from django.contrib.auth import BACKEND_SESSION_KEY
from django.contrib.auth import logout as end_portal_session
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from portal.signin import cas, ldap, oidc

# Which module knows the IdP logout for a session signed in through which backend class.
_BY_BACKEND_PREFIX = {
    "portal.signin.oidc": oidc,
    "portal.signin.cas": cas,
    "portal.signin.ldap": ldap,
}


@require_POST
def logout(request: HttpRequest) -> HttpResponse:
    backend = request.session.get(BACKEND_SESSION_KEY, "")
    idp_url = None
    for prefix, module in _BY_BACKEND_PREFIX.items():
        if backend.startswith(prefix + "."):
            idp_url = module.idp_logout_url(request)
    end_portal_session(request)
    if idp_url:
        return HttpResponseRedirect(idp_url)
    return redirect("login")
