"""An open WebSocket lives only as long as the sign-in and the right it was opened with.

A WebSocket is authenticated once, at its handshake; the person may sign out, be signed out
by an admin, be disabled, or lose the right to what the socket streams (a TA removed from a
course, an admin made a plain user) while it stays open. :func:`guard` runs beside such a
consumer and asks every few seconds: does the login session still exist, still belong to
this user (Django's own check, password changes included), is the user still active
(:func:`still_signed_in`), and, through the consumer's ``allowed``, may the person still
have what the socket sends. When not, it closes the socket with :data:`CLOSE_SIGNED_OUT`
or :data:`CLOSE_FORBIDDEN` (:mod:`nodeagent.gateway.codes`) (docs/security.md "WebSockets").
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from channels.db import database_sync_to_async

from nodeagent.gateway.codes import CLOSE_FORBIDDEN, CLOSE_SIGNED_OUT
from people.login_sessions import signed_in_user

log = logging.getLogger(__name__)

LISTENER_CHECK_S = 5.0  # how often a live-update socket (one per open page) checks

Allowed = Callable[[Any], bool]  # the freshly read user -> may they still listen?


@database_sync_to_async
def still_signed_in(session_key: str, user_pk: int) -> bool:
    """Does the login session still exist, for this user, who is still active?"""
    return signed_in_user(session_key, user_pk) is not None


@database_sync_to_async
def standing(session_key: str | None, user_pk: int, allowed: Allowed | None) -> int | None:
    """None while the socket may stay open; else the close code that ends it."""
    user = signed_in_user(session_key, user_pk)
    if user is None:
        return CLOSE_SIGNED_OUT
    if allowed is not None and not allowed(user):
        return CLOSE_FORBIDDEN
    return None


SignIn = tuple[str | None, int]  # (login session key, user id)


def sign_in_of(scope: dict) -> SignIn | None:
    """(login session key or None, user id) of a handshake by a signed-in person; None if
    not signed in."""
    user = scope.get("user")
    if user is None or not user.is_authenticated:
        return None
    return getattr(scope.get("session"), "session_key", None) or None, user.pk


async def refuse(consumer: Any, code: int) -> None:
    """End a socket the person may not have, with a close code the page can read: accepted,
    then closed. Closed before the accept, daphne answers the handshake 403 and the browser
    sees only 1006, so a signed-out page would go on retrying."""
    await consumer.accept()
    await consumer.close(code=code)


async def guard(
    consumer: Any, sign_in: SignIn, interval: float, allowed: Allowed | None = None
) -> int:
    """Check every ``interval`` seconds; close ``consumer`` when its sign-in or right ends.
    Returns the close code it closed with."""
    session_key, user_pk = sign_in
    # The handshake has just checked the sign-in (the auth middleware read the login session
    # and its user): the first check is one interval later, not at once. A class opening two
    # hundred pages at once would read every sign-in twice in the same second.
    await asyncio.sleep(interval)
    while (code := await standing(session_key, user_pk, allowed)) is None:
        await asyncio.sleep(interval)
    reason = "no longer signed in" if code == CLOSE_SIGNED_OUT else "no longer allowed"
    log.info("%s closed: user %s is %s", type(consumer).__name__, user_pk, reason)
    await consumer.close(code=code)
    return code
