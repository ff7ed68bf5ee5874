"""Is a login session still signed in? One answer for the sockets that live as long as a sign-in
(``portal.live.socket_guard``) and the gateway tickets issued under one
(``scheduling.services.gateway_revocation``).

:func:`signed_in_users` answers for many sign-ins at once, in two queries however many: a
portal process checks every socket it holds together (a class's two hundred open pages each
read their login session and their user every few seconds before, two queries each). Its
verdict is Django's own ``get_user``'s for each login session: the session exists and has
not expired, names a backend still configured and a user who exists, whose password hash
still matches the one signed into it (or one of the ``SECRET_KEY_FALLBACKS``' hashes); the
user must also be active. It only reads: where ``get_user`` would rotate a session that a
fallback key verified, or flush one that no longer matches, the person's next page does that.
Every backend configured (the model's, LDAP's, CAS's, OIDC's) reads its user by primary key,
which is what the one query for the users does.
"""

from __future__ import annotations

from collections.abc import Collection
from importlib import import_module
from typing import Any

from django.conf import settings
from django.contrib.auth import (
    BACKEND_SESSION_KEY,
    HASH_SESSION_KEY,
    SESSION_KEY,
    get_user_model,
)
from django.contrib.auth.models import AbstractBaseUser
from django.utils import timezone
from django.utils.crypto import constant_time_compare

SignIn = tuple[str | None, int]  # (login session key or None, user id)


def signed_in_user(session_key: str | None, user_pk: int) -> AbstractBaseUser | None:
    """The user of this login session, read afresh, when it still exists, is still theirs
    and they are still active; None when not. Without a login session (a socket whose scope
    has none, as in-process tests open them), the user read afresh, while active."""
    return signed_in_users([(session_key, user_pk)])[(session_key, user_pk)]


def signed_in_users(sign_ins: Collection[SignIn]) -> dict[SignIn, AbstractBaseUser | None]:
    """:func:`signed_in_user` for each sign-in, in one read of the login sessions and one of
    the users."""
    claimed = _claimed_users({key for key, _ in sign_ins if key})
    wanted = {pk for _, pk in sign_ins}
    users = {
        user.pk: user
        for user in get_user_model()._default_manager.filter(pk__in=wanted, is_active=True)
    }
    found: dict[SignIn, AbstractBaseUser | None] = {}
    for key, pk in sign_ins:
        user = users.get(pk)
        if user is not None and key is not None:
            data = claimed.get(key)
            if data is None or str(data.get(SESSION_KEY)) != str(pk) or not _hash_holds(user, data):
                user = None
        found[(key, pk)] = user
    return found


def _claimed_users(keys: set[str]) -> dict[str, dict[str, Any]]:
    """Each live (not expired) login session's data, by key, that names a backend still
    configured; the others are left out."""
    if not keys:
        return {}
    store_class = import_module(settings.SESSION_ENGINE).SessionStore
    if hasattr(store_class, "get_model_class"):  # the database's engines: one query for all
        store = store_class()
        rows = store_class.get_model_class()._default_manager.filter(
            session_key__in=keys, expire_date__gt=timezone.now()
        )
        loaded = {row.session_key: store.decode(row.session_data) for row in rows}
    else:  # the cache's or the cookie's: each by itself
        loaded = {key: store_class(session_key=key).load() for key in keys}
    return {
        key: data
        for key, data in loaded.items()
        if data.get(BACKEND_SESSION_KEY) in settings.AUTHENTICATION_BACKENDS
    }


def _hash_holds(user: AbstractBaseUser, data: dict[str, Any]) -> bool:
    """Django's session verification: the hash signed in with is the user's, under the
    secret key or one of its fallbacks (a new password changes it)."""
    session_hash = data.get(HASH_SESSION_KEY)
    if not session_hash:
        return False
    if constant_time_compare(session_hash, user.get_session_auth_hash()):
        return True
    return any(
        constant_time_compare(session_hash, fallback)
        for fallback in user.get_session_auth_fallback_hash()
    )
