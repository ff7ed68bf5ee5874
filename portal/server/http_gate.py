"""The HTTP gate: people's requests enter Django a few at a time per process; the agents' pass.

Django runs each synchronous view in a thread of its own. At a class start two hundred
requests arrive within a second, and a process that lets them all in runs two hundred threads
that share one interpreter lock (and ten database connections): every request advances at a
two-hundredth of the process's speed, so all of them finish late together, and a node agent's
report that its desktops are RUNNING, or its fetch of what to start, waits behind the whole
class. That wait was the largest part of a class start's placed → RUNNING.

So at most :data:`settings.HTTP_CONCURRENCY` of people's requests are inside Django at once in
each process; the others wait on the event loop in arrival order (a coroutine each: no
thread, no database connection, no memory beyond the request line and headers, since the
body is read only once a request is let in). Reads first (a poll before the desktop
requests waiting ahead of it) was tried and measured worse at the 95th percentile: polls
answered at once come back sooner and more often, and take the CPU the last desktop
requests of the class needed; in arrival order each student's next poll waits its turn.
The node agents' API (``/api/agent/``) passes the gate: the agents serve the whole class,
and their requests are few and small. WebSockets do not pass through here.

``DESKPOOL_HTTP_CONCURRENCY=0`` turns the gate off. Figures: docs/measurements.md, "The class
start as it happens".
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

AGENT_PREFIX = "/api/agent/"

Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


class HttpGate:
    """ASGI middleware: at most ``limit`` HTTP requests of people in ``app`` at once."""

    def __init__(self, app: Callable[..., Awaitable[None]], limit: int) -> None:
        self.app = app
        self.limit = limit
        self._slots: asyncio.Semaphore | None = None  # made on the server's event loop

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if self.limit <= 0 or scope["type"] != "http" or scope["path"].startswith(AGENT_PREFIX):
            await self.app(scope, receive, send)
            return
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.limit)
        async with self._slots:
            await self.app(scope, receive, send)
