"""Is a login session still signed in? One answer for the sockets that live as long as a sign-in
(``portal.live.socket_guard``) and the gateway tickets issued under one
(``scheduling.services.gateway_revocation``)."""

from __future__ import annotations

from importlib import import_module
from types import SimpleNamespace

from django.conf import settings
from django.contrib.auth import get_user, get_user_model
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser


def signed_in_user(
    session_key: str | None, user_pk: int
) -> AbstractBaseUser | AnonymousUser | None:
    """The user of this login session, read afresh, when it still exists, is still theirs
    and they are still active; None when not. Without a login session (a socket whose scope
    has none, as in-process tests open them), the user read afresh, while active."""
    if session_key is None:
        return get_user_model().objects.filter(pk=user_pk, is_active=True).first()
    store = import_module(settings.SESSION_ENGINE).SessionStore(session_key=session_key)
    # One read: a login session that is gone or expired loads empty, and get_user then
    # answers AnonymousUser (no separate "exists" query first).
    user = get_user(SimpleNamespace(session=store))  # type: ignore[arg-type]
    if user.is_authenticated and user.pk == user_pk and user.is_active:
        return user
    return None
