"""``POST /api/agent/v1/wait/``: the agent's long-poll, answered when its node's desired
state changes (docs/agent-protocol.md, "Told, not polling").

A plain ASGI application in front of Django (``portal.asgi``): a wait holds no thread and no
database connection while it waits, so one ASGI process holds thousands. The request body is
a :class:`~nodeagent.protocol.WaitRequest`; the answer a
:class:`~nodeagent.protocol.DesiredState` with its ``version``, sent as soon as the node's
version differs from ``since`` (``scheduling.services.agent_wake`` bumps it after each
commit that changes what the node should run) or after ``timeout_s`` at the latest, the slow
fallback poll. A heartbeat in the body is recorded first, so an idle node costs one request
per wait. Each process listens on one Redis pub/sub connection for every node's wake-ups.

Errors are the agent API's: 401 :class:`DetailAnswer` (no or unknown node token), 400
:class:`ErrorAnswer`, 405, 413, 415; 503 with Retry-After when the database or Redis cannot
answer. Nothing here raises into the server's log for bad input.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import weakref
from collections import defaultdict
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import redis
import redis.asyncio as aioredis
from asgiref.sync import sync_to_async
from django import db
from django.conf import settings
from django.db import OperationalError
from django.utils.translation import gettext as _
from pydantic import BaseModel, ValidationError

from nodeagent.protocol import DesiredState, DetailAnswer, Heartbeat, WaitRequest, to_wire
from portal.agents.api import error_answer
from scheduling.models import Node
from scheduling.redis_client import wake_channel
from scheduling.services import ServiceError
from scheduling.services.agent_sessions import desired_state
from scheduling.services.agent_wake import version_key
from scheduling.services.nodes import do_heartbeat, node_for_token

log = logging.getLogger(__name__)

PATH = "/api/agent/v1/wait/"
MAX_BODY = 256 * 1024  # a heartbeat of 64 GPUs with MIG slices is well under this
UNSUBSCRIBED_WAIT_S = 2.0  # while the wake-up subscription is down: wait this at most
T = TypeVar("T")


class WakeListener:
    """One Redis subscription per process (per event loop) for every node's wake-ups."""

    def __init__(self) -> None:
        self.waiters: dict[int, set[asyncio.Event]] = defaultdict(set)
        self.subscribed = asyncio.Event()
        self.client = aioredis.Redis.from_url(
            settings.LOCK_REDIS_URL, socket_timeout=5, max_connections=1000
        )
        self.task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self.task is None or self.task.done():
            self.task = asyncio.get_running_loop().create_task(self._listen())

    async def version(self, node_id: int) -> int:
        value = await self.client.get(version_key(node_id))
        return int(value) if value else 0

    async def wait(self, node_id: int, since: int, timeout_s: float) -> bool:
        """True as soon as the node's version differs from ``since``; False after
        ``timeout_s`` with the version unchanged."""
        self.start()
        with contextlib.suppress(TimeoutError):  # the first wait of a process subscribes
            await asyncio.wait_for(self.subscribed.wait(), UNSUBSCRIBED_WAIT_S)
        event = asyncio.Event()
        self.waiters[node_id].add(event)  # before reading the version: no wake-up is missed
        try:
            if await self.version(node_id) != since:
                return True
            if not self.subscribed.is_set():
                timeout_s = min(timeout_s, UNSUBSCRIBED_WAIT_S)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), timeout_s)
            return await self.version(node_id) != since
        finally:
            waiting = self.waiters.get(node_id)
            if waiting is not None:
                waiting.discard(event)
                if not waiting:
                    del self.waiters[node_id]

    def _wake(self, node_id: int) -> None:
        for event in self.waiters.get(node_id, ()):
            event.set()

    async def _listen(self) -> None:
        delay = 0.5
        while True:
            pubsub = self.client.pubsub()
            try:
                await pubsub.subscribe(wake_channel())
                async for message in pubsub.listen():
                    if message["type"] == "subscribe":
                        # Waits begun while unsubscribed end within UNSUBSCRIBED_WAIT_S and
                        # read the version again: no wake-up of that time is lost.
                        self.subscribed.set()
                        delay = 0.5
                    elif message["type"] == "message":
                        self._wake(int(message["data"]))
            except (redis.RedisError, OSError, ValueError) as error:
                log.warning(
                    "agent wait: wake-up subscription lost (%s); again in %.1f s", error, delay
                )
            finally:
                self.subscribed.clear()
                await pubsub.aclose()
            await asyncio.sleep(delay)
            delay = min(delay * 2, 10.0)


_listeners: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, WakeListener] = (
    weakref.WeakKeyDictionary()
)


def listener() -> WakeListener:
    loop = asyncio.get_running_loop()
    if loop not in _listeners:
        _listeners[loop] = WakeListener()
    return _listeners[loop]


def _db(fn: Callable[..., T]) -> Callable[..., Awaitable[T]]:
    """A database call off the event loop, in the shared thread pool (not one thread per
    wait); its connection goes back to the pool when the call returns, from the context that
    took it (asgiref runs the call in a copy of the caller's context)."""

    def call(*args: Any) -> T:
        try:
            return fn(*args)
        finally:
            db.connection.close()

    return sync_to_async(call, thread_sensitive=False)


class Answer(Exception):
    """Stop and answer this status and message."""

    def __init__(self, status: int, message: BaseModel, headers: dict[str, str] | None = None):
        self.status = status
        self.message = message
        self.headers = headers or {}


async def agent_wait(scope: dict[str, Any], receive: Callable, send: Callable) -> None:
    """The ASGI application of ``wait/``."""
    try:
        await _serve(scope, receive, send)
    except Answer as answer:
        await _send(send, answer.status, to_wire(answer.message), answer.headers)
    except (OperationalError, redis.RedisError) as error:
        log.warning("agent wait: answered 503: %s", error)
        retry = str(settings.OVERLOAD_RETRY_AFTER_S)
        busy = DetailAnswer(detail=f"The portal is busy; try again in {retry} s.")
        await _send(send, 503, to_wire(busy), {"Retry-After": retry})


async def _serve(scope: dict[str, Any], receive: Callable, send: Callable) -> None:
    if scope["method"] != "POST":
        raise Answer(405, DetailAnswer(detail="Use POST."), {"Allow": "POST"})
    headers = {name.decode("latin-1").lower(): value for name, value in scope["headers"]}
    if not headers.get("content-type", b"").startswith(b"application/json"):
        raise Answer(415, DetailAnswer(detail="Send a JSON body (application/json)."))
    body = await _read_body(receive)
    if body is None:
        return  # the agent went away before it finished asking
    node = await _authenticate(headers.get("authorization", b""))
    try:
        request = WaitRequest.model_validate_json(body)
    except ValidationError as error:
        raise Answer(400, error_answer(WaitRequest, error)) from None
    if request.heartbeat is not None:
        await _db(_heartbeat)(node, request.heartbeat)
    wait = asyncio.ensure_future(listener().wait(node.pk, request.since, request.timeout_s))
    gone = asyncio.ensure_future(_disconnected(receive))
    try:
        await asyncio.wait({wait, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (wait, gone):
            task.cancel()
    if gone.done() and not gone.cancelled():
        return  # the agent went away; it will ask again
    changed = wait.result()  # a Redis error while waiting: 503
    if not changed and request.unchanged_ok:
        await _send(send, 204, None)  # nothing to read: the agent keeps what it has
        return
    state: DesiredState = await _db(desired_state)(node)
    await _send(send, 200, to_wire(state))


def _heartbeat(node: Node, heartbeat: Heartbeat) -> None:
    try:
        do_heartbeat(node, heartbeat)
    except ServiceError as error:
        raise Answer(400, DetailAnswer(detail=error.message)) from None


async def _authenticate(header: bytes) -> Node:
    refused = Answer(
        401,
        DetailAnswer(detail=_("Unknown node token; register again.")),
        {"WWW-Authenticate": "Node"},
    )
    try:
        keyword, _space, token = header.decode("ascii").partition(" ")
    except UnicodeDecodeError:
        raise refused from None
    if keyword != "Node" or not token.strip():
        raise refused
    node = await _db(node_for_token)(token.strip())
    if node is None:
        raise refused
    return node


async def _read_body(receive: Callable) -> bytes | None:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY:
            raise Answer(413, DetailAnswer(detail=f"The body is over {MAX_BODY} bytes."))
        chunks.append(chunk)
        if not message.get("more_body"):
            return b"".join(chunks)


async def _disconnected(receive: Callable) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def _send(send: Callable, status: int, body: Any, headers: dict[str, str] | None = None):
    payload = b"" if body is None else json.dumps(body).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
    raw += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": payload})
