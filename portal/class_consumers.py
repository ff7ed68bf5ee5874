"""The live class over Channels: a course's open desktops, row by row, for its teachers."""

from __future__ import annotations

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.template.loader import render_to_string
from django.utils import timezone, translation

from scheduling.events import course_group
from scheduling.services.classroom import class_sessions

from .input_limits import ListenOnly
from .preferences import handshake_language, saved_preferences
from .teaching import CourseRole, role_by_code


def render_class_row(role: CourseRole, session_id: int) -> str:
    """The session's row of the live class (``courses/_class_row.html``), or "" when it is no
    longer an open session of the course (the page then drops the row)."""
    session = class_sessions(role.course).filter(pk=session_id).first()
    if session is None:
        return ""
    context = {"s": session, "can_manage": role.manage_class_desktops, "code": role.course.code}
    return render_to_string("courses/_class_row.html", context)


class ClassConsumer(ListenOnly, AsyncJsonWebsocketConsumer):
    """Sends ``class.row`` messages (the row's HTML, rendered in the listener's language and
    time zone) for every session update of the course; teachers and TAs with
    ``view_live_class`` only; what a client sends is dropped (``ListenOnly``)."""

    group: str | None = None

    async def connect(self) -> None:
        user = self.scope.get("user")
        code = self.scope["url_route"]["kwargs"]["code"]
        role = None
        if user is not None and user.is_authenticated:
            role = await database_sync_to_async(role_by_code)(user, code)
        if role is None or not role.view_live_class:
            await self.close(code=4403)
            return
        self.role = role
        saved, self.zone = await database_sync_to_async(saved_preferences)(user)
        self.language = saved or handshake_language(self.scope)
        self.group = course_group(role.course.pk)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()

    async def disconnect(self, code: int) -> None:
        if self.group is not None:
            await self.channel_layer.group_discard(self.group, self.channel_name)

    def _row(self, session_id: int) -> str:
        with translation.override(self.language), timezone.override(self.zone):
            return render_class_row(self.role, session_id)

    async def session_update(self, event: dict) -> None:
        session_id = int(event["session"]["id"])
        html = await database_sync_to_async(self._row)(session_id)
        await self.send_json({"type": "class.row", "session": session_id, "html": html})
