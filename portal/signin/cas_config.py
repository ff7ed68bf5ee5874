"""CAS sign-in settings from the environment (docs/signin.md); no Django imports."""

from __future__ import annotations

import environ

from portal.signin.part import Part, Secret


def configure(env: environ.Env, secret: Secret) -> Part | None:
    """The CAS backend's settings, or None while it is not configured."""
    return None
