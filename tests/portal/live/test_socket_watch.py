"""The process's watch over its sockets (``portal.live.socket_guard.Watch``), without a
database: the verdicts come from a stand-in for ``standings``. A socket that cannot be closed
does not keep the others of its batch open; a check that fails (the database away) closes
nobody and is made again an interval later; a socket that left is not checked again."""

from __future__ import annotations

import asyncio

import pytest

from nodeagent.gateway.codes import CLOSE_SIGNED_OUT
from portal.live import socket_guard


class Socket:
    def __init__(self, name: str, *, breaks: bool = False) -> None:
        self.name, self.breaks = name, breaks
        self.closed: list[int] = []

    async def close(self, code: int) -> None:
        if self.breaks:
            raise RuntimeError("the connection is gone")
        self.closed.append(code)


class Verdicts:
    """standings' stand-in: every member signed out, or raising while ``fails``."""

    def __init__(self) -> None:
        self.fails = False
        self.batches: list[list[int]] = []

    def __call__(self, members):  # type: ignore[no-untyped-def]
        self.batches.append(sorted(m.sign_in[1] for m in members))
        if self.fails:
            raise ConnectionError("the database is away")
        return [CLOSE_SIGNED_OUT] * len(members)


@pytest.fixture
def verdicts(monkeypatch):  # type: ignore[no-untyped-def]
    found = Verdicts()
    monkeypatch.setattr(socket_guard, "standings", found)
    # The verdicts run on a thread as the real ones do; no database connection to close.
    monkeypatch.setattr(
        socket_guard, "database_sync_to_async", lambda f: lambda *a: asyncio.to_thread(f, *a)
    )
    return found


def test_a_socket_that_cannot_be_closed_does_not_keep_the_others_open(verdicts):
    async def run() -> tuple[Socket, Socket, Socket]:
        sockets = Socket("a", breaks=True), Socket("b"), Socket("c")
        for n, socket in enumerate(sockets, start=1):
            socket_guard.watch(socket, (f"key{n}", n), 0.1)
        await asyncio.sleep(0.5)
        return sockets

    a, b, c = asyncio.run(run())
    assert verdicts.batches == [[1, 2, 3]]  # one batch; each closed socket left the watch
    assert (a.closed, b.closed, c.closed) == ([], [CLOSE_SIGNED_OUT], [CLOSE_SIGNED_OUT])


def test_a_failed_check_closes_nobody_and_is_made_again(verdicts):
    async def run() -> tuple[Socket, list[int], int]:
        socket = Socket("a")
        verdicts.fails = True
        socket_guard.watch(socket, ("key", 7), 0.1)
        await asyncio.sleep(0.35)
        closed_while_failing = list(socket.closed)
        failed = len(verdicts.batches)
        verdicts.fails = False
        await asyncio.sleep(0.3)
        return socket, closed_while_failing, failed

    socket, closed_while_failing, failed = asyncio.run(run())
    assert closed_while_failing == []
    assert 2 <= failed <= 4  # about one an interval, not a busy loop
    assert socket.closed == [CLOSE_SIGNED_OUT]


def test_a_socket_that_left_is_not_checked(verdicts):
    async def run() -> Socket:
        stays, leaves = Socket("stays"), Socket("leaves")
        socket_guard.watch(stays, ("k1", 1), 0.1)
        socket_guard.watch(leaves, ("k2", 2), 0.1)
        socket_guard.unwatch(leaves)
        await asyncio.sleep(0.3)
        return leaves

    leaves = asyncio.run(run())
    assert verdicts.batches == [[1]]
    assert leaves.closed == []
