"""Run the test OIDC provider: ``python -m tests.signin.oidc_provider.serve PORT``.

Creates its SQLite database under ``$OIDC_TEST_DIR``, loads ``$OIDC_TEST_DIR/seed.json`` (its
users and the one client it serves, see :mod:`tests.signin.oidc_provider.process`) and serves
HTTP on 127.0.0.1:PORT until it is stopped.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.signin.oidc_provider.settings")
django.setup()

from django.contrib.auth.models import User  # noqa: E402
from django.core.management import call_command  # noqa: E402
from oauth2_provider.models import Application  # noqa: E402


def seed(spec: dict) -> None:
    for person in spec["users"]:
        User.objects.create_user(
            person["username"],
            password=person["password"],
            email=person.get("email", ""),
            first_name=person.get("first_name", ""),
            last_name=person.get("last_name", ""),
        )
    client = spec["client"]
    # A confidential client, trusted (no consent page), signing ID tokens with RS256.
    Application.objects.create(
        name="deskpool",
        client_id=client["client_id"],
        client_secret=client["client_secret"],
        client_type=Application.CLIENT_CONFIDENTIAL,
        authorization_grant_type=Application.GRANT_AUTHORIZATION_CODE,
        redirect_uris=" ".join(client["redirect_uris"]),
        post_logout_redirect_uris=" ".join(client["post_logout_redirect_uris"]),
        skip_authorization=True,
        algorithm=Application.RS256_ALGORITHM,
    )


def main(port: str) -> None:
    call_command("migrate", run_syncdb=True, verbosity=0)
    seed(json.loads((Path(os.environ["OIDC_TEST_DIR"]) / "seed.json").read_text()))
    call_command("runserver", f"127.0.0.1:{port}", use_reloader=False, use_threading=True)


if __name__ == "__main__":
    main(sys.argv[1])
