"""Channels consumers: live updates for a person's pages, and the desktop proxy."""

from __future__ import annotations

import asyncio
import contextlib
import logging

import websockets
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer, AsyncWebsocketConsumer
from django.utils import timezone, translation

from scheduling.choices import OPENABLE_STATES
from scheduling.events import ADMIN_GROUP, user_group
from scheduling.models import Session
from scheduling.models.alerts import AlertLevel, AlertState, Metric
from scheduling.models.policy import QuotaRequestState
from scheduling.presenters import render

from .preferences import handshake_language, saved_preferences
from .session_fragment import render_both

log = logging.getLogger(__name__)


class UpdatesConsumer(AsyncJsonWebsocketConsumer):
    """Pushes ``session.update`` events for the signed-in person's sessions."""

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=4401)
            return
        # The person's saved language and zone win over the handshake's, as on the pages.
        saved, self.zone = await database_sync_to_async(saved_preferences)(user)
        self.language = saved or handshake_language(self.scope)
        self.groups_joined = [user_group(user.pk)]
        if user.is_staff:
            self.groups_joined.append(ADMIN_GROUP)
        for group in self.groups_joined:
            await self.channel_layer.group_add(group, self.channel_name)
        await self.accept()

    async def disconnect(self, code: int) -> None:
        for group in getattr(self, "groups_joined", []):
            await self.channel_layer.group_discard(group, self.channel_name)

    def _render(self, code: str, params: dict) -> str:
        """The reason in the listener's language and time zone (the sender rendered it in
        its own)."""
        with translation.override(self.language), timezone.override(self.zone):
            return render(code, params)

    async def session_update(self, event: dict) -> None:
        """The payload, and the session's one rendering (``templates/portal/_session.html``)
        in the listener's language and zone, for the page to swap in."""
        session = dict(event["session"])
        session["reason"] = self._render(session["reason_code"], session["reason_params"])
        with translation.override(self.language), timezone.override(self.zone):
            html = render_both(session) if "state" in session else {}
        await self.send_json({"type": "session.update", "session": session, **html})

    async def admin_session(self, event: dict) -> None:
        """Someone's session changed: the admins' console pages refresh what they show."""
        await self.send_json(
            {"type": "admin.session", "session": event["session"], "state": event["state"]}
        )

    async def admin_audit(self, event: dict) -> None:
        """An audit event was written: the admins' console pages refresh."""
        await self.send_json({"type": "admin.audit", "kind": event["kind"]})

    async def quota_update(self, event: dict) -> None:
        request = dict(event["request"])
        with translation.override(self.language):
            request["state_label"] = str(QuotaRequestState(request["state"]).label)
        await self.send_json({"type": "quota.update", "request": request})

    async def alert_update(self, event: dict) -> None:
        """An alert raised, escalated, acknowledged or resolved (admins' pages only), with its
        labels in the listener's language."""
        alert = dict(event["alert"])
        with translation.override(self.language):
            alert["metric_label"] = str(Metric(alert["metric"]).label)
            alert["level_label"] = str(AlertLevel(alert["level"]).label)
            alert["state_label"] = str(AlertState(alert["state"]).label)
        await self.send_json({"type": "alert.update", "alert": alert})

    async def pool_alert(self, event: dict) -> None:
        alert = {k: event[k] for k in ("type", "level", "utilisation", "reason_code")}
        alert["reason_params"] = event["reason_params"]
        alert["reason"] = self._render(event["reason_code"], event["reason_params"])
        await self.send_json(alert)


@database_sync_to_async
def _desktop_endpoint(user, session_id: int) -> tuple[str, int] | None:
    session = (
        Session.objects.openable_by(user)
        .select_related("node")
        .filter(
            pk=session_id,
            state__in=OPENABLE_STATES,
            desktop_port__isnull=False,
        )
        .first()
    )
    if session is None or session.desktop_port is None or session.node is None:
        return None
    # The node's registered management address (docs/deploy.md), not one an agent reported.
    return session.node.address, session.desktop_port


class DesktopProxyConsumer(AsyncWebsocketConsumer):
    """Relays noVNC's WebSocket to the session's websockify, for its owner and admins only."""

    # No channel layer: the proxy gets nothing through it, and listening on it would tie
    # every open desktop to a blocking Redis read (one that redis-py's default 5 s socket
    # timeout breaks, dropping the desktop).
    channel_layer_alias = None
    upstream: websockets.ClientConnection | None = None
    pump: asyncio.Task | None = None

    async def connect(self) -> None:
        user = self.scope.get("user")
        session_id = int(self.scope["url_route"]["kwargs"]["session_id"])
        endpoint = None
        if user is not None and user.is_authenticated:
            endpoint = await _desktop_endpoint(user, session_id)
        if endpoint is None:
            await self.close(code=4403)
            return
        host, port = endpoint
        try:
            self.upstream = await websockets.connect(
                f"ws://{host}:{port}/websockify",
                max_size=None,
                open_timeout=5,
                compression=None,
            )
        except (OSError, websockets.InvalidHandshake, TimeoutError) as error:
            log.warning("desktop %s unreachable at %s:%s: %s", session_id, host, port, error)
            await self.close(code=4502)
            return
        await self.accept()
        self.pump = asyncio.create_task(self._from_desktop())

    async def _from_desktop(self) -> None:
        assert self.upstream is not None
        try:
            async for message in self.upstream:
                if isinstance(message, bytes):
                    await self.send(bytes_data=message)
                else:
                    await self.send(text_data=message)
        except websockets.ConnectionClosed:
            pass
        finally:
            await self.close()

    async def receive(self, text_data=None, bytes_data=None) -> None:
        if self.upstream is None:
            return
        with contextlib.suppress(websockets.ConnectionClosed):
            await self.upstream.send(bytes_data if bytes_data is not None else text_data)

    async def disconnect(self, code: int) -> None:
        if self.upstream is not None:
            await self.upstream.close()
        if self.pump is not None:
            self.pump.cancel()
