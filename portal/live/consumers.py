"""Channels consumers: live updates for a person's pages. A desktop's screen and sound do not
pass through the portal: the node's gateway carries them (docs/architecture.md, "Two
planes")."""

from __future__ import annotations

import logging
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.utils import timezone, translation

from nodeagent.gateway.codes import CLOSE_BAD_REQUEST, CLOSE_SIGNED_OUT
from people.preferences import handshake_language, saved_preferences
from portal.kit.session_fragment import BOTH, PAGE_FORMS, render_forms
from portal.live.catch_up import asked_sessions, visible_payloads
from portal.live.listen_only import ListenOnly
from portal.live.socket_guard import LISTENER_CHECK_S, refuse, sign_in_of, unwatch, watch
from scheduling.events import ADMIN_GROUP, user_group
from scheduling.models.alerts import AlertLevel, AlertState, Metric
from scheduling.models.policy import QuotaRequestState
from scheduling.presenters import render

log = logging.getLogger(__name__)

__all__ = ["UpdatesConsumer"]


def page_forms(query_string: bytes) -> tuple[str, ...] | None:
    """The card forms a page's updates carry: ``?fragment=detail``, ``item`` or ``none``;
    without it, both; None for anything else."""
    asked = parse_qs(query_string.decode("latin-1")).get("fragment")
    if asked is None:
        return BOTH
    return PAGE_FORMS.get(asked[0]) if len(asked) == 1 else None


class UpdatesConsumer(ListenOnly, AsyncJsonWebsocketConsumer):
    """Pushes ``session.update`` events for the signed-in person's sessions, first those the
    page names (``?sessions=``: its catch-up) as they are; what a client sends is dropped
    (``ListenOnly``). Open only while the sign-in stands (4401 after) and,
    for the admins' events, while the person is an admin (4403 after): every
    :attr:`check_s` (:func:`portal.live.socket_guard.watch`)."""

    check_s = LISTENER_CHECK_S

    async def connect(self) -> None:
        user = self.scope.get("user")
        sign_in = sign_in_of(self.scope)
        if user is None or not user.is_authenticated or sign_in is None:
            await refuse(self, CLOSE_SIGNED_OUT)
            return
        query = self.scope.get("query_string", b"")
        forms, catch_up = page_forms(query), asked_sessions(query)
        if forms is None or catch_up is None:
            # ?fragment= names no form a page shows, or ?sessions= is not a list of ids.
            await self.close(code=CLOSE_BAD_REQUEST)
            return
        self.forms = forms
        # The person's saved language and zone win over the handshake's, as on the pages.
        saved, self.zone = await database_sync_to_async(saved_preferences)(user)
        self.language = saved or handshake_language(self.scope)
        self.groups_joined = [user_group(user.pk)]
        if user.is_staff:
            self.groups_joined.append(ADMIN_GROUP)
        for group in self.groups_joined:
            await self.channel_layer.group_add(group, self.channel_name)
        await self.accept()
        admin = ADMIN_GROUP in self.groups_joined
        watch(self, sign_in, self.check_s, (lambda fresh: fresh.is_staff) if admin else None)
        if catch_up:  # the page's cards as they are now (portal.live.catch_up)
            for payload in await database_sync_to_async(visible_payloads)(user, catch_up):
                await self.session_update({"session": payload})

    async def disconnect(self, code: int) -> None:
        unwatch(self)
        for group in getattr(self, "groups_joined", []):
            await self.channel_layer.group_discard(group, self.channel_name)

    def _render(self, code: str, params: dict) -> str:
        """The reason in the listener's language and time zone (the sender rendered it in
        its own)."""
        with translation.override(self.language), timezone.override(self.zone):
            return render(code, params)

    async def session_update(self, event: dict) -> None:
        """The payload, and the session's one rendering (``templates/portal/_session.html``)
        in the listener's language and zone, in the form the page shows, for it to swap in."""
        session = dict(event["session"])
        session["reason"] = self._render(session["reason_code"], session["reason_params"])
        with translation.override(self.language), timezone.override(self.zone):
            html = render_forms(session, self.forms) if "state" in session else {}
        await self.send_json({"type": "session.update", "session": session, **html})

    async def admin_session(self, event: dict) -> None:
        """Sessions changed (their ids and states): the admins' console pages refresh what
        they show."""
        await self.send_json({"type": "admin.session", "sessions": event["sessions"]})

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
