"""OIDC sign-in settings from the environment (docs/signin.md); no Django imports.

On as soon as ``DESKPOOL_OIDC_CLIENT_ID`` is set. The portal is a confidential client of the
campus identity provider (authorization code flow with PKCE, ID tokens signed with RS256 and
checked against the provider's JWKS). mozilla-django-oidc runs the flow;
:class:`portal.signin.oidc.CampusOIDCBackend` hands the claims to
:func:`portal.signin.identity.sync_person`, the one place that creates and updates accounts.
"""

from __future__ import annotations

import environ

from portal.signin.part import Part, Secret

BACKEND = "portal.signin.oidc.CampusOIDCBackend"

# The provider's endpoints: each one a variable (its discovery document lists them).
ENDPOINT_VARIABLES = {
    "OIDC_OP_AUTHORIZATION_ENDPOINT": "DESKPOOL_OIDC_AUTHORIZATION_ENDPOINT",
    "OIDC_OP_TOKEN_ENDPOINT": "DESKPOOL_OIDC_TOKEN_ENDPOINT",
    "OIDC_OP_USER_ENDPOINT": "DESKPOOL_OIDC_USERINFO_ENDPOINT",
    "OIDC_OP_JWKS_ENDPOINT": "DESKPOOL_OIDC_JWKS_ENDPOINT",
}

# Which claim carries what; each is a variable (docs/signin.md "OIDC").
CLAIM_VARIABLES = {
    "username": ("DESKPOOL_OIDC_USERNAME_CLAIM", "preferred_username"),
    "groups": ("DESKPOOL_OIDC_GROUPS_CLAIM", "groups"),
    "department": ("DESKPOOL_OIDC_DEPARTMENT_CLAIM", "department"),
    "email": ("DESKPOOL_OIDC_EMAIL_CLAIM", "email"),
    "first_name": ("DESKPOOL_OIDC_FIRST_NAME_CLAIM", "given_name"),
    "last_name": ("DESKPOOL_OIDC_LAST_NAME_CLAIM", "family_name"),
}


def configure(env: environ.Env, secret: Secret) -> Part | None:
    """The OIDC backend's settings, or None while DESKPOOL_OIDC_CLIENT_ID is not set."""
    client_id = env.str("DESKPOOL_OIDC_CLIENT_ID", default="").strip()
    if not client_id:
        return None
    endpoints = {
        setting: env.str(variable, default="").strip()
        for setting, variable in ENDPOINT_VARIABLES.items()
    }
    missing = [ENDPOINT_VARIABLES[name] for name, url in endpoints.items() if not url]
    if missing:
        raise environ.ImproperlyConfigured(
            "DESKPOOL_OIDC_CLIENT_ID is set: " + ", ".join(missing) + " must be set too"
        )
    ca_file = env.str("DESKPOOL_OIDC_CA_FILE", default="").strip()
    settings: dict[str, object] = {
        **endpoints,
        "OIDC_RP_CLIENT_ID": client_id,
        "OIDC_RP_CLIENT_SECRET": secret("DESKPOOL_OIDC_CLIENT_SECRET", ""),
        # ID tokens signed by the provider's key, never with the shared client secret.
        "OIDC_RP_SIGN_ALGO": "RS256",
        "OIDC_RP_SCOPES": env.str("DESKPOOL_OIDC_SCOPES", default="openid email profile"),
        "OIDC_USE_NONCE": True,
        "OIDC_USE_PKCE": env.bool("DESKPOOL_OIDC_USE_PKCE", default=True),
        # client_secret_basic (OIDC's default) or, when false, client_secret_post.
        "OIDC_TOKEN_USE_BASIC_AUTH": env.bool("DESKPOOL_OIDC_TOKEN_BASIC_AUTH", default=True),
        "OIDC_TIMEOUT": env.float("DESKPOOL_OIDC_TIMEOUT_S", default=10.0),
        # requests' verify: True (the system's CAs) or the campus CA bundle's path.
        "OIDC_VERIFY_SSL": ca_file or True,
        # Accounts are made by sync_person (CampusOIDCBackend.create_user), on first sign-in.
        "OIDC_CREATE_USER": True,
        # Kept in the session for the end-session request's id_token_hint at logout.
        "OIDC_STORE_ID_TOKEN": True,
        "OIDC_STORE_ACCESS_TOKEN": False,
        "OIDC_AUTHENTICATION_CALLBACK_URL": "oidc_authentication_callback",
        # Optional: where the portal's logout sends the browser to end the provider's session.
        "OIDC_OP_LOGOUT_ENDPOINT": env.str(
            "DESKPOOL_OIDC_END_SESSION_ENDPOINT", default=""
        ).strip(),
        # Optional: the ID token's "iss" must be exactly this (the discovery's "issuer").
        "OIDC_OP_ISSUER": env.str("DESKPOOL_OIDC_ISSUER", default="").strip(),
        "OIDC_CAMPUS_CLAIMS": {
            key: env.str(name, default=default).strip()
            for key, (name, default) in CLAIM_VARIABLES.items()
        },
    }
    return Part(name="oidc", backends=[BACKEND], settings=settings)
