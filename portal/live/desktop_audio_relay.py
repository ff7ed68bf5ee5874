"""The audio relay: a desktop's sound, to the browser that shows its screen.

noVNC carries no sound; the desktop serves it on a port of its own
(:mod:`nodeagent.desktop_audio`, reported as ``Session.desktop_audio_port``). For whoever may
open the desktop (its owner, an admin: the VNC relay's rule, :func:`may_open`) the relay
connects to that port on the node's management address and logs in with the session's
secret (:func:`nodeagent.desktop_audio.open_audio`: an HMAC of the desktop's challenge, so
the secret never crosses the wire), and only then accepts the browser. It sends one text
frame, the format as JSON (``{"rate": 48000, "channels": 2, "format": "s16le"}``), then the
raw PCM in binary frames of at most :data:`AUDIO_CHUNK_BYTES`, read one at a time, until the
desktop closes the stream; then it closes the WebSocket (1000). What the browser sends is
dropped undecoded (:class:`portal.live.listen_only.ListenOnly`).

Refusals, before the browser is accepted: 4403 to anyone who may not open the desktop (or
while it is not running), :data:`CLOSE_NO_SOUND` (4404) when it may be opened but its image
serves no sound, 4502 when the node's address or the port is not one to connect to
(:func:`scheduling.services.node_address.desktop_endpoint`) or the desktop does not answer,
breaks the exchange or refuses the secret.

As the VNC relay, it lives as long as the sign-in it was opened with and the right to open
the desktop (:func:`portal.live.socket_guard.guard`: 4401, 4403), and it uses no channel
layer. Every accepted listener is audited (``desktop.sound_opened``: who, whose desktop, as
its owner or an admin, from which address); a listener is not a viewer for idle detection.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from dataclasses import dataclass

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer

from nodeagent.desktop_audio import AudioRefused, open_audio
from portal.live.desktop_relay import (
    CLOSE_UNREACHABLE,
    UPSTREAM_TIMEOUT_S,
    may_open,
    running_desktop,
    scope_address,
)
from portal.live.listen_only import ListenOnly
from portal.live.socket_guard import CLOSE_FORBIDDEN, SIGN_IN_CHECK_S, SignIn, guard, sign_in_of
from scheduling.services import session_activity
from scheduling.services.node_address import desktop_endpoint

log = logging.getLogger(__name__)

__all__ = ["AUDIO_CHUNK_BYTES", "CLOSE_NO_SOUND", "DesktopAudioConsumer"]

AUDIO_CHUNK_BYTES = 16384  # at most this much PCM per frame, and in memory at once
CLOSE_NO_SOUND = 4404  # the desktop may be opened, but its image serves no sound

open_sound = database_sync_to_async(session_activity.do_open_sound)


@dataclass(frozen=True)
class SoundTarget:
    endpoint: tuple[str, int] | None  # None: the node's address or the port is not valid
    password: str
    where: str  # for the log


@database_sync_to_async
def sound_target(user, session_id: int) -> SoundTarget | int:  # type: ignore[no-untyped-def]
    """Where the session's sound is and its secret, for someone who may open the desktop;
    else the close code: 4403, or :data:`CLOSE_NO_SOUND` for a desktop without sound."""
    session = running_desktop(user, session_id)
    if session is None or session.node is None:
        return CLOSE_FORBIDDEN
    port = session.desktop_audio_port
    if port is None:
        return CLOSE_NO_SOUND
    # The node's registered management address, checked again (as the VNC relay does).
    address = session.node.address
    return SoundTarget(desktop_endpoint(address, port), session.vnc_password, f"{address!r}:{port}")


class DesktopAudioConsumer(ListenOnly, AsyncWebsocketConsumer):
    """Relays a desktop's sound to its owner's or an admin's browser (the module's
    docstring)."""

    # No channel layer, as the VNC relay (desktop_relay.DesktopProxyConsumer): nothing comes
    # through it, and the sign-in is polled.
    channel_layer_alias = None
    writer: asyncio.StreamWriter | None = None
    tasks: tuple[asyncio.Task, ...] = ()

    async def connect(self) -> None:
        user = self.scope.get("user")
        sign_in = sign_in_of(self.scope)
        session_id = int(self.scope["url_route"]["kwargs"]["session_id"])
        # Only a login session (the cookie's): the relay lives as long as it does.
        if sign_in is None or not sign_in[0]:
            await self.close(code=CLOSE_FORBIDDEN)
            return
        target = await sound_target(user, session_id)
        if isinstance(target, int):
            await self.close(code=target)
            return
        if target.endpoint is None:
            log.warning("desktop %s sound: refused to connect to %s", session_id, target.where)
            await self.close(code=CLOSE_UNREACHABLE)
            return
        host, port = target.endpoint
        try:
            reader, self.writer, found = await open_audio(
                host, port, target.password, UPSTREAM_TIMEOUT_S
            )
        except (OSError, TimeoutError, AudioRefused) as error:
            log.warning("desktop %s sound unreachable at %s: %s", session_id, target.where, error)
            await self.close(code=CLOSE_UNREACHABLE)
            return
        await self.accept()
        await self.send(text_data=json.dumps(found.as_json()))
        await open_sound(session_id, user, scope_address(self.scope))
        self.tasks = (
            asyncio.create_task(self._from_desktop(reader, session_id)),
            asyncio.create_task(self._watch_sign_in(sign_in, session_id)),
        )

    async def _from_desktop(self, reader: asyncio.StreamReader, session_id: int) -> None:
        """The PCM as it comes, one chunk in memory at a time; the end of it ends the socket."""
        try:
            while chunk := await reader.read(AUDIO_CHUNK_BYTES):
                await self.send(bytes_data=chunk)
        except OSError as error:
            log.info("desktop %s sound: the stream broke: %s", session_id, error)
        await self.close()

    async def _watch_sign_in(self, sign_in: SignIn, session_id: int) -> None:
        await guard(self, sign_in, SIGN_IN_CHECK_S, lambda user: may_open(user, session_id))
        self._stop_tasks()  # closed: no more sound, and no second close
        await self._close_upstream()

    async def disconnect(self, code: int) -> None:
        self._stop_tasks()
        await self._close_upstream()

    def _stop_tasks(self) -> None:
        for task in self.tasks:
            if task is not asyncio.current_task():
                task.cancel()

    async def _close_upstream(self) -> None:
        writer, self.writer = self.writer, None
        if writer is not None:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
