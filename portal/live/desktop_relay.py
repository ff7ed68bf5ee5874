"""The desktop relay: noVNC's WebSocket to the session's websockify, logged in by the portal.

The VNC password never leaves the portal. For the session's owner (or an admin) the relay
opens ``ws://<node address>:<port>/websockify``, does the RFB handshake there itself with VNC
authentication (security type 2: the 16-byte challenge DES-encrypted with the session's
secret, :func:`nodeagent.rfb_login.log_in_upstream`), and only then accepts the browser,
to which it plays the server's part of the handshake offering security type None. From the
browser's ClientInit on, bytes pass unchanged both ways. A browser cannot try passwords: it
has none to try, and a wrong one is never asked for.

The relay lives as long as the sign-in it was opened with: every :data:`SIGN_IN_CHECK_S` it
asks whether that login session still exists, still belongs to this user (Django's own
check, password changes included) and whether the user is still active; when not (logout,
an admin ending the user's sessions, a disabled account) it closes with 4401; when the person
may no longer open the session (an admin made a plain user) with 4403
(:func:`portal.live.socket_guard.guard`).

The node's address is its word: the relay connects only to a valid ``host:port`` in the
management network (:func:`scheduling.services.node_address.desktop_url`), else 4502. Every
accepted viewer is audited (``desktop.opened``: who, whose desktop, as its owner or an admin).

Bounded memory: a message either way is at most ``settings.RELAY_MAX_MESSAGE_BYTES`` (the
desktop's side by websockets' ``max_size``, which reads no payload past it; the browser's by
daphne, 1 MiB, and checked here again); at most :data:`UPSTREAM_QUEUE` of the desktop's
messages wait unread, and the handshake holds at most
:data:`nodeagent.rfb_login.HANDSHAKE_MAX_BYTES`. A message over the limit ends the relay
with :data:`CLOSE_TOO_BIG` (4413) and a reason in the person's language (daphne 4.2
forwards the close code but not the reason). Flow control is the ASGI worker's
(:mod:`portal.server.daphne_worker`): ``send`` returns once the browser has drained the
connection, so while the browser does not read the relay does not read the desktop, and a
browser that sends faster than the desktop reads is no longer read either.

Idle detection (docs/lifecycle.md): an accepted relay is a viewer
(``session_activity.viewer_opened``, and ``viewer_closed`` when it ends). Past the handshake
the browser's bytes go through :class:`nodeagent.rfb_input.InputCounter`, which counts keyboard
and mouse events (never their content); every :data:`INPUT_FLUSH_S` with events, and at
the end, the count goes to ``session_activity.record_input`` with the time of the latest.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from types import SimpleNamespace

import websockets
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings
from django.template.defaultfilters import filesizeformat
from django.utils import translation
from django.utils.translation import gettext as _

from nodeagent.rfb_input import InputCounter
from nodeagent.rfb_login import (
    RFB_38,
    BrowserHandshake,
    RfbError,
    log_in_upstream,
)
from people.preferences import handshake_language, saved_preferences
from portal.kit.client_address import client_address_of
from portal.live.socket_guard import (
    CLOSE_FORBIDDEN,
    CLOSE_SIGNED_OUT,
    SIGN_IN_CHECK_S,
    SignIn,
    guard,
    sign_in_of,
    still_signed_in,
)
from scheduling.choices import OPENABLE_STATES
from scheduling.models import Session
from scheduling.services import session_activity
from scheduling.services.node_address import desktop_url

log = logging.getLogger(__name__)

__all__ = ["SIGN_IN_CHECK_S", "CLOSE_SIGNED_OUT", "still_signed_in", "DesktopProxyConsumer"]

UPSTREAM_TIMEOUT_S = 5.0  # connect and log in to the desktop within this
UPSTREAM_QUEUE = 4  # the desktop's messages received but not yet relayed, at most
CLOSE_UNREACHABLE, CLOSE_TOO_BIG = 4502, 4413
REASON_MAX_BYTES = 123  # what a WebSocket close frame carries
MESSAGE_TOO_BIG = 1009  # the close code websockets sends for a message over max_size
INPUT_FLUSH_S = 5.0  # how often counted input goes to the activity store (while there is any)
CLIENT_INIT_LENGTH = 1  # the browser's first byte past the handshake, before any message

record_input = database_sync_to_async(session_activity.record_input)
open_viewer = database_sync_to_async(session_activity.do_open_viewer)
viewer_closed = database_sync_to_async(session_activity.viewer_closed)


@dataclass(frozen=True)
class Target:
    url: str | None  # None: the node's address or the port is not one to connect to
    password: str
    where: str  # for the log


def may_open(user, session_id: int) -> bool:  # type: ignore[no-untyped-def]
    """May this (freshly read) user still open the session's desktop?"""
    return Session.objects.openable_by(user).filter(pk=session_id).exists()


def running_desktop(user, session_id: int) -> Session | None:  # type: ignore[no-untyped-def]
    """The session with its node, if ``user`` may open it and its desktop runs on a node;
    the sound's relay asks it too."""
    return (
        Session.objects.openable_by(user)
        .select_related("node")
        .filter(pk=session_id, state__in=OPENABLE_STATES, node__isnull=False)
        .first()
    )


@database_sync_to_async
def desktop_target(user, session_id: int) -> Target | None:  # type: ignore[no-untyped-def]
    """Where the session's websockify is and its secret, for someone who may open it."""
    session = running_desktop(user, session_id)
    if session is None or session.desktop_port is None or session.node is None:
        return None
    # The node's registered management address (docs/deploy.md), not one an agent reported,
    # checked again here: a bare host in DESKPOOL_NODE_ADDRESS_NETWORKS, a port 1-65535.
    address, port = session.node.address, session.desktop_port
    return Target(desktop_url(address, port), session.vnc_password, f"{address!r}:{port}")


@database_sync_to_async
def language_of(user, scope: dict) -> str:  # type: ignore[no-untyped-def]
    saved, _zone = saved_preferences(user)
    return saved or handshake_language(scope)


def scope_address(scope: dict) -> str | None:
    """The browser's address, as the audit trail has it for a request (behind nginx, the
    address it saw): :func:`portal.kit.client_address.client_address_of` on the handshake."""
    headers = dict(scope.get("headers", []))
    meta = {"REMOTE_ADDR": (scope.get("client") or ("",))[0] or ""}
    if forwarded := headers.get(b"x-forwarded-for"):
        meta["HTTP_X_FORWARDED_FOR"] = forwarded.decode("latin-1")
    return client_address_of(SimpleNamespace(META=meta))  # type: ignore[arg-type]


def close_reason(text: str) -> str:
    """``text`` cut to what a close frame carries (123 bytes of UTF-8)."""
    data = text.encode()
    if len(data) <= REASON_MAX_BYTES:
        return text
    return data[: REASON_MAX_BYTES - 3].decode(errors="ignore") + "…"


class DesktopProxyConsumer(AsyncWebsocketConsumer):
    """Relays noVNC's WebSocket to the session's websockify, for its owner and admins only,
    logged in by the portal (the module's docstring)."""

    # No channel layer: the proxy gets nothing through it, and listening on it would tie
    # every open desktop to a blocking Redis read (one that redis-py's default 5 s socket
    # timeout breaks, dropping the desktop). The sign-in is polled instead.
    channel_layer_alias = None
    upstream: websockets.ClientConnection | None = None
    handshake: BrowserHandshake | None = None
    pending = b""  # what the desktop sent past its SecurityResult, for after the handshake
    tasks: tuple[asyncio.Task, ...] = ()
    session_id = 0
    viewing = False  # the viewer was counted: viewer_closed is owed
    counter: InputCounter | None = None
    input_at = 0.0  # time.time() of the latest counted event
    language = settings.LANGUAGE_CODE  # of the close reasons the person may read

    async def connect(self) -> None:
        user = self.scope.get("user")
        sign_in = sign_in_of(self.scope)
        session_id = int(self.scope["url_route"]["kwargs"]["session_id"])
        # Only a login session (the cookie's): the relay lives as long as it does.
        target = await desktop_target(user, session_id) if sign_in and sign_in[0] else None
        if sign_in is None or target is None:
            await self.close(code=CLOSE_FORBIDDEN)
            return
        if target.url is None:
            log.warning("desktop %s: refused to connect to %s", session_id, target.where)
            await self.close(code=CLOSE_UNREACHABLE)
            return
        limit = settings.RELAY_MAX_MESSAGE_BYTES
        try:
            self.upstream = await websockets.connect(
                target.url,
                max_size=limit,
                max_queue=UPSTREAM_QUEUE,
                open_timeout=UPSTREAM_TIMEOUT_S,
                compression=None,
            )
            pending = await asyncio.wait_for(
                log_in_upstream(self.upstream, target.password), UPSTREAM_TIMEOUT_S
            )
        except (
            OSError,
            websockets.InvalidHandshake,
            websockets.ConnectionClosed,
            TimeoutError,
            RfbError,
        ) as error:
            log.warning("desktop %s unreachable at %s: %s", session_id, target.where, error)
            await self._close_upstream()
            await self.close(code=CLOSE_UNREACHABLE)
            return
        self.pending = pending
        self.handshake = BrowserHandshake()
        self.session_id = session_id
        self.counter = InputCounter(skip=CLIENT_INIT_LENGTH)
        self.language = await language_of(user, self.scope)
        await self.accept()
        await self.send(bytes_data=RFB_38)
        self.viewing = True
        await open_viewer(session_id, user, scope_address(self.scope))
        self.tasks = (
            asyncio.create_task(self._from_desktop()),
            asyncio.create_task(self._watch_sign_in(sign_in)),
            asyncio.create_task(self._flush_input_regularly()),
        )

    async def _from_desktop(self) -> None:
        assert self.upstream is not None
        try:
            async for message in self.upstream:
                if isinstance(message, bytes):
                    await self.send(bytes_data=message)
                else:
                    await self.send(text_data=message)
        except websockets.ConnectionClosed as closed:
            if closed.sent is not None and closed.sent.code == MESSAGE_TOO_BIG:
                await self._too_much(by_desktop=True)
                return
        await self.close()

    async def _too_much(self, by_desktop: bool) -> None:
        """Close both ways, saying why in the person's language: a side sent a message over
        the limit."""
        limit = settings.RELAY_MAX_MESSAGE_BYTES
        side = "desktop" if by_desktop else "browser"
        log.warning("desktop %s: the %s sent over %d bytes at once", self.session_id, side, limit)
        with translation.override(self.language):
            if by_desktop:
                text = _("The desktop sent more at once than the portal relays (%(limit)s).")
            else:
                text = _("This page sent more at once than the portal relays (%(limit)s).")
            text %= {"limit": filesizeformat(limit)}
        await self.close(code=CLOSE_TOO_BIG, reason=close_reason(text))
        await self._close_upstream()

    async def _watch_sign_in(self, sign_in: SignIn) -> None:
        session_id = self.session_id
        await guard(self, sign_in, SIGN_IN_CHECK_S, lambda user: may_open(user, session_id))
        await self._close_upstream()

    async def receive(self, text_data=None, bytes_data=None) -> None:
        if self.upstream is None or self.handshake is None:
            return
        if bytes_data is None:  # RFB travels in binary frames only
            await self.close()
            return
        if len(bytes_data) > settings.RELAY_MAX_MESSAGE_BYTES:
            await self._too_much(by_desktop=False)
            return
        data = bytes_data
        if not self.handshake.done:
            try:
                reply, data = self.handshake.feed(data)
            except RfbError as error:
                log.info("desktop relay: %s", error)
                await self.close()
                return
            if reply:
                await self.send(bytes_data=reply)
            if self.handshake.done and self.pending:
                await self.send(bytes_data=self.pending)
            if not data:
                return
        if self.counter is not None and self.counter.feed(data):
            self.input_at = time.time()
        with contextlib.suppress(websockets.ConnectionClosed):
            await self.upstream.send(data)

    async def _flush_input_regularly(self) -> None:
        while True:
            await asyncio.sleep(INPUT_FLUSH_S)
            await self._flush_input()

    async def _flush_input(self) -> None:
        events = self.counter.take() if self.counter is not None else 0
        if events:
            at = datetime.fromtimestamp(self.input_at, tz=UTC)
            await record_input(self.session_id, events, at)

    async def disconnect(self, code: int) -> None:
        for task in self.tasks:
            if task is not asyncio.current_task():
                task.cancel()
        await self._close_upstream()
        if self.viewing:
            self.viewing = False
            await self._flush_input()
            await viewer_closed(self.session_id)

    async def _close_upstream(self) -> None:
        if self.upstream is not None:
            await self.upstream.close()
