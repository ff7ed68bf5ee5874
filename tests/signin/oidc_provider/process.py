"""Start and stop the test OIDC provider (django-oauth-toolkit) in its own process.

No Django import here: the test process has the portal's settings, the provider its own
(:mod:`tests.signin.oidc_provider.settings`).
"""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

from tests.integration.stack import free_port
from tests.signin.django_server import DjangoServer


class OidcProvider(DjangoServer):
    """An OpenID Connect provider on 127.0.0.1 with its own SQLite database under ``workdir``.

    ``users``: dicts of username, password, email, first_name, last_name, groups, department
    and, optionally, claimed_username (the preferred_username released instead of the login).
    One confidential client, ``client_id``/``client_secret``, trusted (no consent page), may
    come back to ``/oidc/callback/`` and, after logout, ``/login/`` of any portal on
    127.0.0.1 (loopback redirect URIs match on any port, RFC 8252).
    """

    client_id = "deskpool-portal"
    client_secret = "oidc-client-secret-for-tests"

    def __init__(self, workdir: Path, users: list[dict]):
        self.workdir = workdir
        self.workdir.mkdir(parents=True, exist_ok=True)
        client = {
            "client_id": self.client_id,
            "client_secret": self.client_secret,
            "redirect_uris": ["http://127.0.0.1/oidc/callback/"],
            "post_logout_redirect_uris": ["http://127.0.0.1/login/"],
        }
        (workdir / "seed.json").write_text(json.dumps({"users": users, "client": client}))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.issuer = f"{self.url}/o"
        self.log = workdir / "oidc-provider.log"
        self.process = None

    package = "tests.signin.oidc_provider"
    dir_variable = "OIDC_TEST_DIR"
    what = "the OIDC provider"

    def ready_url(self) -> str:
        return f"{self.issuer}/.well-known/openid-configuration"

    def portal_env(self) -> dict[str, str]:
        """The portal's DESKPOOL_OIDC_* variables for this provider (its discovery document's
        endpoints)."""
        return {
            "DESKPOOL_OIDC_CLIENT_ID": self.client_id,
            "DESKPOOL_OIDC_CLIENT_SECRET": self.client_secret,
            "DESKPOOL_OIDC_AUTHORIZATION_ENDPOINT": f"{self.issuer}/authorize/",
            "DESKPOOL_OIDC_TOKEN_ENDPOINT": f"{self.issuer}/token/",
            "DESKPOOL_OIDC_USERINFO_ENDPOINT": f"{self.issuer}/userinfo/",
            "DESKPOOL_OIDC_JWKS_ENDPOINT": f"{self.issuer}/.well-known/jwks.json",
            "DESKPOOL_OIDC_END_SESSION_ENDPOINT": f"{self.issuer}/logout/",
            "DESKPOOL_OIDC_ISSUER": self.issuer,
            "DESKPOOL_OIDC_SCOPES": "openid email profile groups",
        }

    def discovery(self) -> dict:
        url = f"{self.issuer}/.well-known/openid-configuration"
        with urllib.request.urlopen(url, timeout=10) as answer:
            return json.loads(answer.read())
