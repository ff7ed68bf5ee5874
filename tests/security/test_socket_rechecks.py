"""Live-update sockets end with the sign-in and the right they were opened with (issue 25).

A WebSocket is authenticated at its handshake only. In process, through the portal's ASGI
application with a real login cookie: the updates socket closes with 4401 once its login
session ends (logout) and with 4403 once an admin listening to the admins' events is no
longer one; the live class socket closes with 4403 once a TA is removed from the course,
and with 4401 once the account is disabled (``portal.live.socket_guard``, every ``check_s``,
shortened here). A socket opened without a sign-in, or to a class the person may not watch,
is accepted and closed at once with 4401 or 4403, so that the page can read the code and
stop (a refusal at the handshake reaches the browser as 1006, which pages retry).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import User
from django.contrib.sessions.backends.db import SessionStore
from django.db import connection
from django.test.utils import CaptureQueriesContext
from guardian.shortcuts import assign_perm, remove_perm

from people.models import Course
from portal.asgi import application
from portal.live import socket_guard
from portal.live.class_consumers import ClassConsumer
from portal.live.consumers import UpdatesConsumer
from tests.security.test_bad_input import signed_in_cookie

pytestmark = pytest.mark.django_db(transaction=True)
WAIT_S = 10


@pytest.fixture(autouse=True)
def _check_often(monkeypatch):
    monkeypatch.setattr(UpdatesConsumer, "check_s", 0.05, raising=False)
    monkeypatch.setattr(ClassConsumer, "check_s", 0.05, raising=False)


def close_code_after(path: str, cookie: bytes, change: Callable[[], object]) -> int:
    """Open ``path`` signed in with ``cookie``, make ``change`` (in a thread: it writes to
    the database), and return the code the socket closes with."""

    async def run() -> int:
        socket = WebsocketCommunicator(
            application,
            path,
            headers=[
                (b"cookie", cookie),
                (b"origin", b"http://testserver"),
                (b"host", b"testserver"),
            ],
        )
        connected, _ = await socket.connect(timeout=WAIT_S)
        assert connected, path
        await asyncio.sleep(0.2)  # a few checks pass while nothing changed
        await database_sync_to_async(change)()
        while True:
            output = await socket.receive_output(timeout=WAIT_S)
            if output["type"] == "websocket.close":
                return output["code"]

    return async_to_sync(run)()


def session_key(cookie: bytes) -> str:
    return cookie.decode().split("=", 1)[1]


def test_the_updates_socket_closes_with_4401_after_logout(owner):
    cookie = signed_in_cookie(owner)
    code = close_code_after(
        "/ws/updates/", cookie, lambda: SessionStore(session_key(cookie)).delete()
    )
    assert code == 4401


def test_an_admins_updates_socket_closes_with_4403_when_they_are_no_longer_admin(admin_user):
    cookie = signed_in_cookie(admin_user)

    def demote() -> None:
        User.objects.filter(pk=admin_user.pk).update(is_staff=False, is_superuser=False)

    assert close_code_after("/ws/updates/", cookie, demote) == 4403


def test_a_removed_tas_live_class_socket_closes_with_4403(owner, make_user):
    course = Course.objects.create(code="cs101", title="GPU 101")
    course.instructors.add(owner)
    ta = make_user("tina")
    assign_perm("portal.view_live_class", ta, course)
    cookie = signed_in_cookie(ta)

    def remove_ta() -> None:
        remove_perm("portal.view_live_class", ta, course)

    assert close_code_after("/ws/courses/cs101/", cookie, remove_ta) == 4403


def test_a_disabled_teachers_live_class_socket_closes_with_4401(owner):
    course = Course.objects.create(code="cs101", title="GPU 101")
    course.instructors.add(owner)
    cookie = signed_in_cookie(owner)

    def disable() -> None:
        User.objects.filter(pk=owner.pk).update(is_active=False)

    assert close_code_after("/ws/courses/cs101/", cookie, disable) == 4401


@pytest.mark.parametrize(
    ("path", "cookie_of", "code"),
    [("/ws/updates/", None, 4401), ("/ws/courses/cs101/", None, 4401),
     ("/ws/courses/cs101/", "owner", 4403)],
)  # fmt: skip
def test_a_socket_refused_at_its_opening_says_why_with_a_close_code(owner, path, cookie_of, code):
    Course.objects.create(code="cs101", title="GPUs")
    headers = [(b"origin", b"http://testserver"), (b"host", b"testserver")]
    if cookie_of:
        headers.append((b"cookie", signed_in_cookie(owner)))

    async def run() -> tuple[bool, dict]:
        socket = WebsocketCommunicator(application, path, headers=headers)
        connected, _ = await socket.connect(timeout=WAIT_S)
        return connected, await socket.receive_output(timeout=WAIT_S)

    assert async_to_sync(run)() == (True, {"type": "websocket.close", "code": code})


def open_socket(cookie: bytes, path: str = "/ws/updates/") -> WebsocketCommunicator:
    return WebsocketCommunicator(
        application,
        path,
        headers=[(b"cookie", cookie), (b"origin", b"http://testserver"), (b"host", b"testserver")],
    )


class CountedChecks:
    """Each batch of checks the watch makes: its time, its members and its queries."""

    def __init__(self, monkeypatch) -> None:  # type: ignore[no-untyped-def]
        self.batches: list[tuple[float, int, int]] = []
        self.original = socket_guard.standings
        monkeypatch.setattr(socket_guard, "standings", self.standings)

    def standings(self, members):  # type: ignore[no-untyped-def]
        with CaptureQueriesContext(connection) as queries:
            codes = self.original(members)
        self.batches.append((time.monotonic(), len(members), len(queries)))
        return codes


def test_the_first_recheck_waits_one_interval_after_the_handshake(owner, monkeypatch):
    """The handshake has just read the login session and its user: the first check comes
    one ``check_s`` later, not at once (a class opening two hundred pages at once would read
    each sign-in twice in the same second); then every ``check_s``."""
    checks = CountedChecks(monkeypatch)
    monkeypatch.setattr(UpdatesConsumer, "check_s", 0.4, raising=False)
    cookie = signed_in_cookie(owner)

    async def run() -> tuple[float, list]:
        socket = open_socket(cookie)
        connected, _ = await socket.connect(timeout=WAIT_S)
        assert connected
        opened = time.monotonic()
        await asyncio.sleep(0.2)
        early = list(checks.batches)
        for _ in range(int(WAIT_S / 0.05)):  # then the first check comes (a busy loop: later)
            if len(checks.batches) >= 2:
                break
            await asyncio.sleep(0.05)
        await socket.disconnect()
        return opened, early

    opened, early = async_to_sync(run)()
    assert early == []  # none in the first interval
    assert len(checks.batches) >= 2
    assert checks.batches[0][0] - opened >= 0.3  # the first one an interval later
    assert checks.batches[1][0] - checks.batches[0][0] >= 0.3  # and the next, one more


def test_sockets_opened_together_are_checked_together_in_two_queries(make_user, monkeypatch):
    """Six pages, of six people, opened within a moment: every later check reads all six
    sign-ins at once, two queries (the login sessions, the users), not two a socket; and a
    sign-out among them still closes that socket alone, with 4401."""
    checks = CountedChecks(monkeypatch)
    monkeypatch.setattr(UpdatesConsumer, "check_s", 0.3, raising=False)
    cookies = [signed_in_cookie(make_user(f"pupil{n}")) for n in range(6)]

    async def run() -> list[int | None]:
        sockets = [open_socket(cookie) for cookie in cookies]
        for socket in sockets:
            connected, _ = await socket.connect(timeout=WAIT_S)
            assert connected
        for _ in range(int(WAIT_S / 0.05)):
            if len(checks.batches) >= 2:
                break
            await asyncio.sleep(0.05)
        await database_sync_to_async(SessionStore(session_key(cookies[2])).delete)()
        closed = await sockets[2].receive_output(timeout=WAIT_S)
        codes: list[int | None] = []
        for n, socket in enumerate(sockets):
            if n == 2:
                codes.append(closed.get("code"))
                continue
            codes.append(None if await socket.receive_nothing(timeout=0.4) else -1)
            await socket.disconnect()
        return codes

    codes = async_to_sync(run)()
    assert codes == [None, None, 4401, None, None, None]
    assert checks.batches[0][1:] == (6, 2)  # all six, two queries
    assert all(queries == 2 for _, _, queries in checks.batches)
