"""CAS sign-in settings from the environment (docs/signin.md); no Django imports.

On as soon as ``DESKPOOL_CAS_SERVER_URL`` is set. The portal speaks CAS 3.0 (attributes in
the ticket validation's answer). django-cas-ng neither creates accounts nor copies
attributes onto them: :class:`portal.signin.cas.CampusCASBackend` hands every validated
ticket to :func:`portal.signin.identity.sync_person`.
"""

from __future__ import annotations

import environ

from portal.signin.part import Part, Secret

# Which released CAS attribute carries what; each is a variable (docs/signin.md "CAS").
ATTRIBUTE_VARIABLES = {
    "groups": ("DESKPOOL_CAS_GROUPS_ATTRIBUTE", "memberOf"),
    "department": ("DESKPOOL_CAS_DEPARTMENT_ATTRIBUTE", "department"),
    "email": ("DESKPOOL_CAS_EMAIL_ATTRIBUTE", "mail"),
    "first_name": ("DESKPOOL_CAS_FIRST_NAME_ATTRIBUTE", "givenName"),
    "last_name": ("DESKPOOL_CAS_LAST_NAME_ATTRIBUTE", "sn"),
    # Empty: the CAS user name itself (<cas:user>) is the account name.
    "username": ("DESKPOOL_CAS_USERNAME_ATTRIBUTE", ""),
}
DEFAULT_ATTRIBUTES = {key: default for key, (_name, default) in ATTRIBUTE_VARIABLES.items()}
DEFAULT_TIMEOUT_S = 10.0


def configure(env: environ.Env, secret: Secret) -> Part | None:
    """The CAS backend's settings, or None while it is not configured."""
    server_url = env.str("DESKPOOL_CAS_SERVER_URL", default="").strip()
    if not server_url:
        return None
    # The client joins "login", "logout" and "p3/serviceValidate" to this URL: without the
    # trailing slash its last path segment would be replaced.
    if not server_url.endswith("/"):
        server_url += "/"
    settings = {
        "CAS_SERVER_URL": server_url,
        "CAS_VERSION": "3",
        # Accounts are created and updated by sync_person only, never by django-cas-ng.
        "CAS_CREATE_USER": False,
        "CAS_APPLY_ATTRIBUTES_TO_USER": False,
        "CAS_MAP_AFFILIATIONS": False,
        "CAS_RENAME_ATTRIBUTES": {},
        # Where to go after sign-in: ?next= (checked by portal.signin.cas), else the home.
        "CAS_REDIRECT_URL": "/",
        "CAS_IGNORE_REFERER": True,
        "CAS_STORE_NEXT": False,
        "CAS_CHECK_NEXT": True,
        "CAS_RETRY_LOGIN": False,
        "CAS_LOGIN_MSG": None,
        "CAS_LOGGED_MSG": None,
        "CAS_VERIFY_SSL_CERTIFICATE": True,
        "SIGNIN_CAS_ATTRIBUTES": {
            key: env.str(name, default=default).strip()
            for key, (name, default) in ATTRIBUTE_VARIABLES.items()
        },
        # Seconds the portal waits for the CAS server to validate a ticket.
        "SIGNIN_CAS_TIMEOUT_S": env.float("DESKPOOL_CAS_TIMEOUT_S", default=DEFAULT_TIMEOUT_S),
        # The campus CA (PEM) that signed the CAS server's certificate; empty: the usual ones.
        "SIGNIN_CAS_CA_FILE": env.str("DESKPOOL_CAS_CA_FILE", default="").strip(),
    }
    # Behind a reverse proxy: the portal's public root, e.g. https://gpu.campus.edu, from
    # which the service URL the CAS server sees and redirects back to is built.
    service_root = env.str("DESKPOOL_CAS_SERVICE_ROOT", default="").strip()
    if service_root:
        settings["CAS_ROOT_PROXIED_AS"] = service_root
    return Part(name="cas", backends=["portal.signin.cas.CampusCASBackend"], settings=settings)
