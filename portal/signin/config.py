"""The sign-in settings, read from the environment (no Django imports: settings.py uses it).

Each backend module (``oidc_config``, ``cas_config``, ``ldap_config``) returns a
:class:`Part`: the authentication backends it adds and its Django settings, or nothing when
its variables are not set. Local accounts (the demo, break-glass admins) always remain.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import environ

from portal.signin import cas_config, ldap_config, oidc_config
from portal.signin.part import Part, Secret


@dataclass
class Signin:
    parts: list[Part]
    # Shared by every backend: which IdP groups make an admin or a faculty member; everyone
    # else who signs in is a student. Compared case-insensitively.
    admin_groups: list[str]
    faculty_groups: list[str]

    @property
    def backends(self) -> list[str]:
        return [backend for part in self.parts for backend in part.backends]

    @property
    def enabled(self) -> list[str]:
        return [part.name for part in self.parts]

    def settings(self) -> dict[str, Any]:
        merged: dict[str, Any] = {
            "SIGNIN_BACKENDS": self.enabled,
            "SIGNIN_ADMIN_GROUPS": self.admin_groups,
            "SIGNIN_FACULTY_GROUPS": self.faculty_groups,
        }
        for part in self.parts:
            merged.update(part.settings)
        return merged


def read(env: environ.Env, secret: Secret) -> Signin:
    parts = [
        part
        for part in (
            oidc_config.configure(env, secret),
            cas_config.configure(env, secret),
            ldap_config.configure(env, secret),
        )
        if part is not None
    ]
    return Signin(
        parts=parts,
        admin_groups=env.list("DESKPOOL_SIGNIN_ADMIN_GROUPS", default=[]),
        faculty_groups=env.list("DESKPOOL_SIGNIN_FACULTY_GROUPS", default=[]),
    )
