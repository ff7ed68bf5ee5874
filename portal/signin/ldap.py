"""LDAP sign-in (docs/signin.md): the backend, its URLs, and the identity provider's logout.

LDAP uses the portal's own user name and password form on /login/: django-auth-ldap finds
the person in the directory with the service account, binds as them with the password they
typed, and reads their groups; the account itself is made by
:func:`portal.signin.identity.sync_person`, on every sign-in.
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.models import User
from django.http import HttpRequest
from django.urls import URLPattern
from django_auth_ldap.backend import LDAPBackend

from portal.signin.identity import CampusIdentity, SigninRefused, sync_person

urlpatterns: list[URLPattern] = []


def idp_logout_url(request: HttpRequest) -> str | None:
    """LDAP has no identity provider session to end: None."""
    return None


def _first(attrs: dict[str, list[str]] | None, name: str) -> str:
    values = (attrs or {}).get(name) or [""]
    return str(values[0]).strip()


class CampusLDAPBackend(LDAPBackend):
    """django-auth-ldap, with the account made by sync_person from the directory entry."""

    # AUTH_LDAP_CAMPUS_ATTRS (portal.signin.ldap_config): which attribute holds what.
    default_settings = {
        "ALWAYS_UPDATE_USER": False,
        "CAMPUS_ATTRS": {
            "username": "uid",
            "email": "mail",
            "first_name": "givenName",
            "last_name": "sn",
            "department": "departmentNumber",
        },
    }

    def authenticate(
        self,
        request: HttpRequest | None,
        username: str | None = None,
        password: str | None = None,
        **kwargs: Any,
    ) -> User | None:
        try:
            return super().authenticate(request, username=username, password=password, **kwargs)
        except SigninRefused as refused:
            # The form says the sign-in failed; this says why. PermissionDenied then stops
            # Django's authenticate(): no other backend is asked for this user name.
            if request is not None:
                messages.error(request, str(refused), fail_silently=True)
            raise

    def _finds_groups(self) -> bool:
        return self.settings.GROUP_SEARCH is not None and self.settings.GROUP_TYPE is not None

    def get_or_build_user(self, username: str, ldap_user: Any) -> tuple[User, bool]:
        """Called once the directory accepted the password: the account, made or brought up
        to date by sync_person (never built here, so django-auth-ldap saves nothing)."""
        names = self.settings.CAMPUS_ATTRS
        attrs = ldap_user.attrs
        identity = CampusIdentity(
            # The directory's spelling, not what was typed: one account per person.
            username=_first(attrs, names["username"]) or username,
            email=_first(attrs, names["email"]),
            first_name=_first(attrs, names["first_name"]),
            last_name=_first(attrs, names["last_name"]),
            groups=tuple(sorted(ldap_user.group_names)) if self._finds_groups() else (),
            department=_first(attrs, names["department"]),
            source="ldap",
        )
        return sync_person(identity), False
