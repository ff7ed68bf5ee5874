"""An open WebSocket lives only as long as the sign-in and the right it was opened with.

A WebSocket is authenticated once, at its handshake; the person may sign out, be signed out
by an admin, be disabled, or lose the right to what the socket streams (a TA removed from a
course, an admin made a plain user) while it stays open. :func:`watch` puts such a consumer
under its process's :class:`Watch`, which asks every few seconds: does the login session
still exist, still belong to this user (Django's own check, password changes included), is
the user still active (:func:`people.login_sessions.signed_in_users`), and, through the
consumer's ``allowed``, may the person still have what the socket sends. When not, it closes
the socket with :data:`CLOSE_SIGNED_OUT` or :data:`CLOSE_FORBIDDEN`
(:mod:`nodeagent.gateway.codes`) (docs/security.md "WebSockets").

One watch a process (an event loop) and interval checks its sockets together: one read of
their login sessions and one of their users, however many, in one thread hop. Each socket is
still checked at most ``interval`` after the last time (its handshake first): the watch
wakes when the earliest is due and checks with it every socket due within half an interval
more (a class's pages opened within a second are checked as one from then on). Two hundred
open pages cost two queries every few seconds, not four hundred.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from channels.db import database_sync_to_async

from nodeagent.gateway.codes import CLOSE_FORBIDDEN, CLOSE_SIGNED_OUT
from people.login_sessions import SignIn, signed_in_users

log = logging.getLogger(__name__)

LISTENER_CHECK_S = 5.0  # how often a live-update socket (one per open page) is checked

Allowed = Callable[[Any], bool]  # the freshly read user -> may they still listen?


@dataclass
class Member:
    sign_in: SignIn
    allowed: Allowed | None
    due: float  # the event loop's time of its next check


def standings(members: list[Member]) -> list[int | None]:
    """For each member: None while its socket may stay open, else the close code that ends
    it (its sign-in read with every other member's)."""
    users = signed_in_users({m.sign_in for m in members})
    codes: list[int | None] = []
    for member in members:
        user = users[member.sign_in]
        if user is None:
            codes.append(CLOSE_SIGNED_OUT)
        elif member.allowed is not None and not member.allowed(user):
            codes.append(CLOSE_FORBIDDEN)
        else:
            codes.append(None)
    return codes


class Watch:
    """The sockets of one event loop checked every ``interval`` seconds, together."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.members: dict[Any, Member] = {}  # consumer -> its sign-in, right and due time
        self.task: asyncio.Task | None = None
        self.wake = asyncio.Event()

    def add(self, consumer: Any, sign_in: SignIn, allowed: Allowed | None) -> None:
        # The handshake has just checked the sign-in: the first check is one interval later.
        due = asyncio.get_running_loop().time() + self.interval
        self.members[consumer] = Member(sign_in, allowed, due)
        if self.task is None or self.task.done():
            self.task = asyncio.create_task(self._run())
        self.wake.set()

    def discard(self, consumer: Any) -> None:
        self.members.pop(consumer, None)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while self.members:
            self.wake.clear()
            earliest = min(m.due for m in self.members.values())
            if earliest > loop.time():
                # Woken early by a new member, which may be due first (a shorter interval).
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.wake.wait(), earliest - loop.time())
                continue
            await self.check(loop.time() + self.interval / 2)

    async def check(self, horizon: float) -> None:
        """Check every member due before ``horizon``; close the sockets whose sign-in or
        right ended."""
        due = [(c, m) for c, m in self.members.items() if m.due <= horizon]
        try:
            codes = await database_sync_to_async(standings)([m for _, m in due])
        except Exception:  # the database away: nobody is closed for it; checked again
            log.warning("socket checks failed; again in %.0f s", self.interval, exc_info=True)
            codes = [None] * len(due)
        next_due = asyncio.get_running_loop().time() + self.interval
        for _, member in due:
            member.due = next_due
        for (consumer, member), code in zip(due, codes, strict=True):
            if code is None or self.members.get(consumer) is not member:
                continue
            self.discard(consumer)
            reason = "no longer signed in" if code == CLOSE_SIGNED_OUT else "no longer allowed"
            log.info("%s closed: user %s is %s", type(consumer).__name__, member.sign_in[1], reason)
            try:
                await consumer.close(code=code)
            except Exception:  # one socket that cannot be closed must not stop the others'
                log.warning("could not close %s", type(consumer).__name__, exc_info=True)


# Each event loop's watches, by interval (a test's loop goes with its watches).
_watches: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[float, Watch]] = (
    weakref.WeakKeyDictionary()
)


def watch(consumer: Any, sign_in: SignIn, interval: float, allowed: Allowed | None = None) -> None:
    """Check ``consumer``'s sign-in (and ``allowed``) every ``interval`` seconds with the
    process's other sockets; close it when either ends. :func:`unwatch` at its disconnect."""
    loop = asyncio.get_running_loop()
    watches = _watches.setdefault(loop, {})
    if interval not in watches:
        watches[interval] = Watch(interval)
    watches[interval].add(consumer, sign_in, allowed)


def unwatch(consumer: Any) -> None:
    for one in _watches.get(asyncio.get_running_loop(), {}).values():
        one.discard(consumer)


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
