"""LDAP sign-in settings from the environment (docs/signin.md); no Django imports.

django-auth-ldap's own configuration module is made for settings files: it reads nothing
from Django's settings until a sign-in.
"""

from __future__ import annotations

import environ
import ldap
from django_auth_ldap.config import GroupOfNamesType, LDAPSearch

from portal.signin.part import Part, Secret

BACKEND = "portal.signin.ldap.CampusLDAPBackend"


def configure(env: environ.Env, secret: Secret) -> Part | None:
    """The LDAP backend's settings, or None while DESKPOOL_LDAP_SERVER_URI is not set."""
    uri = env.str("DESKPOOL_LDAP_SERVER_URI", default="")
    if not uri:
        return None
    user_base = env.str("DESKPOOL_LDAP_USER_SEARCH_BASE", default="")
    if not user_base:
        raise environ.ImproperlyConfigured(
            "DESKPOOL_LDAP_SERVER_URI is set: DESKPOOL_LDAP_USER_SEARCH_BASE must be set too"
        )
    timeout = env.float("DESKPOOL_LDAP_TIMEOUT_S", default=5.0)
    # Applied in this order to every connection; a CA file needs a new TLS context after it.
    options: dict[int, object] = {
        ldap.OPT_NETWORK_TIMEOUT: timeout,
        ldap.OPT_TIMEOUT: timeout,
        ldap.OPT_REFERRALS: 0,
    }
    ca_file = env.str("DESKPOOL_LDAP_CA_FILE", default="")
    if ca_file:
        options[ldap.OPT_X_TLS_CACERTFILE] = ca_file
        options[ldap.OPT_X_TLS_REQUIRE_CERT] = ldap.OPT_X_TLS_DEMAND
        options[ldap.OPT_X_TLS_NEWCTX] = 0
    group_base = env.str("DESKPOOL_LDAP_GROUP_SEARCH_BASE", default="")
    settings: dict[str, object] = {
        "AUTH_LDAP_SERVER_URI": uri,
        "AUTH_LDAP_BIND_DN": env.str("DESKPOOL_LDAP_BIND_DN", default=""),
        "AUTH_LDAP_BIND_PASSWORD": secret("DESKPOOL_LDAP_BIND_PASSWORD", ""),
        "AUTH_LDAP_START_TLS": env.bool("DESKPOOL_LDAP_START_TLS", default=False),
        "AUTH_LDAP_CONNECTION_OPTIONS": options,
        "AUTH_LDAP_USER_SEARCH": LDAPSearch(
            user_base,
            ldap.SCOPE_SUBTREE,
            env.str("DESKPOOL_LDAP_USER_FILTER", default="(uid=%(user)s)"),
        ),
        # Accounts are created and updated by portal.signin.identity.sync_person only.
        "AUTH_LDAP_ALWAYS_UPDATE_USER": False,
        "AUTH_LDAP_USER_ATTR_MAP": {},
        "AUTH_LDAP_CAMPUS_ATTRS": {
            "username": env.str("DESKPOOL_LDAP_USERNAME_ATTR", default="uid"),
            "email": env.str("DESKPOOL_LDAP_EMAIL_ATTR", default="mail"),
            "first_name": env.str("DESKPOOL_LDAP_FIRST_NAME_ATTR", default="givenName"),
            "last_name": env.str("DESKPOOL_LDAP_LAST_NAME_ATTR", default="sn"),
            "department": env.str("DESKPOOL_LDAP_DEPARTMENT_ATTR", default="departmentNumber"),
        },
    }
    if group_base:
        settings["AUTH_LDAP_GROUP_SEARCH"] = LDAPSearch(
            group_base,
            ldap.SCOPE_SUBTREE,
            env.str("DESKPOOL_LDAP_GROUP_FILTER", default="(objectClass=groupOfNames)"),
        )
        settings["AUTH_LDAP_GROUP_TYPE"] = GroupOfNamesType(
            name_attr=env.str("DESKPOOL_LDAP_GROUP_NAME_ATTR", default="cn")
        )
    return Part(name="ldap", backends=[BACKEND], settings=settings)
