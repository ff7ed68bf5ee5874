"""Account changes in the audit trail (docs/audit.md): API tokens issued and revoked,
passwords changed by their owner or set by someone else. Never the token, never the password:
the token's id and name, the account's user name.

A password is seen changing wherever it changes (``User.save`` with a new password: the Django
admin's forms, ``manage.py changepassword``, any other code): set by an admin when the admin's
password form runs :func:`setting_passwords_as`; changed by its owner when a request of theirs
saved it; set on the console (``manage.py``) when no request did. A hash upgraded at sign-in
is not a change (Django clears the new password before that save).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from django.contrib.auth import get_user_model
from django.db.models.signals import post_save

from people.tokens import ApiToken
from scheduling.choices import AuditKind
from scheduling.models.audit import current_client_address
from scheduling.services.audit import record

CONSOLE_ACTOR = "console"

_password_setter: ContextVar[str | None] = ContextVar("deskpool_password_setter", default=None)


@contextmanager
def setting_passwords_as(actor: str) -> Iterator[None]:
    """Passwords saved within the block are set by ``actor`` (an admin: ``user:<name>``)."""
    token = _password_setter.set(actor)
    try:
        yield
    finally:
        _password_setter.reset(token)


def record_token_issued(token: ApiToken) -> None:
    record(
        AuditKind.API_TOKEN_ISSUED,
        f"user:{token.user.get_username()}",
        data={"token": token.pk, "name": token.name, "expires_at": token.expires_at.isoformat()},
    )


def record_token_revoked(token: ApiToken) -> None:
    record(
        AuditKind.API_TOKEN_REVOKED,
        f"user:{token.user.get_username()}",
        data={"token": token.pk, "name": token.name},
    )


def _password_saved(sender: Any, instance: Any, created: bool, **kwargs: Any) -> None:
    if created or getattr(instance, "_password", None) is None:
        return
    name = instance.get_username()
    owner = f"user:{name}"
    setter = _password_setter.get()
    if setter is not None and setter != owner:
        record(AuditKind.PASSWORD_SET, setter, data={"username": name})
    elif setter is not None or current_client_address() is not None:
        record(AuditKind.PASSWORD_CHANGED, owner, data={"username": name})
    else:
        record(AuditKind.PASSWORD_SET, CONSOLE_ACTOR, data={"username": name})


def connect() -> None:
    """Called once at start (``PortalConfig.ready``)."""
    post_save.connect(
        _password_saved,
        sender=get_user_model(),
        dispatch_uid="scheduling.services.account_audit.password",
    )
