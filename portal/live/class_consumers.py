"""The live class over Channels: a course's open desktops, row by row, for its teachers."""

from __future__ import annotations

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.template.loader import render_to_string
from django.utils import timezone, translation

from nodeagent.gateway.codes import CLOSE_FORBIDDEN, CLOSE_SIGNED_OUT
from people.preferences import handshake_language, saved_preferences
from portal.live.listen_only import ListenOnly
from portal.live.socket_guard import LISTENER_CHECK_S, refuse, sign_in_of, unwatch, watch
from scheduling.events import course_group
from scheduling.services.classroom import class_sessions
from scheduling.services.teaching import CourseRole, role_by_code


def render_class_rows(role: CourseRole, session_ids: list[int]) -> list[tuple[int, str]]:
    """Each session's row of the live class (``courses/_class_row.html``), read in one
    query; "" for one that is no longer an open session of the course (the page then drops
    the row)."""
    open_now = {s.pk: s for s in class_sessions(role.course).filter(pk__in=session_ids)}
    rows = []
    for session_id in session_ids:
        session = open_now.get(session_id)
        context = {"s": session, "can_manage": role.manage_class_desktops, "code": role.course.code}
        html = render_to_string("courses/_class_row.html", context) if session else ""
        rows.append((session_id, html))
    return rows


class ClassConsumer(ListenOnly, AsyncJsonWebsocketConsumer):
    """Sends ``class.row`` messages (the row's HTML, rendered in the listener's language and
    time zone) for every session of the course that changed (``class.sessions``); teachers
    and TAs with ``view_live_class`` only; what a client sends is dropped (``ListenOnly``).
    Open only while the sign-in stands (4401 after) and the person may still view the live
    class (4403 after: a TA removed from the course): every :attr:`check_s`
    (:func:`portal.live.socket_guard.watch`)."""

    group: str | None = None
    check_s = LISTENER_CHECK_S

    async def connect(self) -> None:
        user = self.scope.get("user")
        sign_in = sign_in_of(self.scope)
        code = self.scope["url_route"]["kwargs"]["code"]
        role = None
        if user is not None and user.is_authenticated:
            role = await database_sync_to_async(role_by_code)(user, code)
        if sign_in is None:
            await refuse(self, CLOSE_SIGNED_OUT)
            return
        if role is None or not role.view_live_class:
            await refuse(self, CLOSE_FORBIDDEN)
            return
        self.role = role
        saved, self.zone = await database_sync_to_async(saved_preferences)(user)
        self.language = saved or handshake_language(self.scope)
        self.group = course_group(role.course.pk)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        watch(self, sign_in, self.check_s, self._still_allowed)

    def _still_allowed(self, user) -> bool:  # type: ignore[no-untyped-def]
        role = role_by_code(user, self.role.course.code)
        return role is not None and role.view_live_class

    async def disconnect(self, code: int) -> None:
        unwatch(self)
        if self.group is not None:
            await self.channel_layer.group_discard(self.group, self.channel_name)

    def _rows(self, session_ids: list[int]) -> list[tuple[int, str]]:
        with translation.override(self.language), timezone.override(self.zone):
            return render_class_rows(self.role, session_ids)

    async def class_sessions(self, event: dict) -> None:
        """These sessions of the course changed: a ``class.row`` for each."""
        ids = [int(pk) for pk in event["sessions"]]
        for session_id, html in await database_sync_to_async(self._rows)(ids):
            await self.send_json({"type": "class.row", "session": session_id, "html": html})
