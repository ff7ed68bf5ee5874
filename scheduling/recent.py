"""Pool-wide figures every submit reads, read once a moment per process, not once a submit.

At a class start two hundred submits arrive within a second, and each one read the same
pool-wide figures afresh: the pool's utilisation and its "Pool usage" rule (admission), and
the nodes' state that says whether a profile could ever run (feasibility). Within one
process they are now read at most once every ``settings.POOL_READ_KEEP_S`` (1 s;
``DESKPOOL_POOL_READ_KEEP_S``, 0: every time): each submit still passes admission and the
feasibility check, against figures at most that old. A person's own figures (their quotas,
open sessions, rate limit) are never kept: they are read under the person's lock.

Why that is no looser than before: the utilisation changes when a scheduling cycle places
or a session ends, in other processes and after the submit's commit; a submit never saw the
placements of the submits beside it anyway. An admin's change of the rule, a node's
registration or cordon reaches the submits within the same second.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

from django.conf import settings
from django.db import connection

T = TypeVar("T")

_all: list[Recent] = []


class Recent(Generic[T]):
    """``read()``'s value, kept for ``settings.POOL_READ_KEEP_S`` per database (a process
    serves one; a test run several)."""

    def __init__(self, read: Callable[[], T]) -> None:
        self.read = read
        self._kept: tuple[str, float, T] | None = None
        self._lock = threading.Lock()
        _all.append(self)

    def __call__(self) -> T:
        keep_s = settings.POOL_READ_KEEP_S
        if keep_s <= 0 or connection.in_atomic_block:  # inside a transaction: its own view
            return self.read()
        database = connection.settings_dict["NAME"]
        kept = self._kept
        if kept is not None and kept[0] == database and time.monotonic() - kept[1] < keep_s:
            return kept[2]
        with self._lock:  # one read for the threads that found it old together
            kept = self._kept
            if kept is not None and kept[0] == database and time.monotonic() - kept[1] < keep_s:
                return kept[2]
            value = self.read()
            self._kept = (database, time.monotonic(), value)
            return value

    def forget(self) -> None:
        self._kept = None


def forget_all() -> None:
    """Every kept figure is read afresh next time (the tests that turn the keeping on)."""
    for recent in _all:
        recent.forget()
