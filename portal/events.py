"""Live updates to browsers over Channels. Sent only after the transaction commits.

Payload types are declared here; pages subscribe through ``portal.consumers.UpdatesConsumer``.
"""

from __future__ import annotations

import logging
from typing import Any, Literal, TypedDict

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

log = logging.getLogger(__name__)


class SessionUpdate(TypedDict):
    type: Literal["session.update"]
    session: dict[str, Any]


class PoolAlert(TypedDict):
    type: Literal["pool.alert"]
    level: str  # ok | warn | block
    utilisation: float
    message: str


ADMIN_GROUP = "pool-admins"


def user_group(user_id: int) -> str:
    return f"user-{user_id}"


def send_after_commit(group: str, payload: SessionUpdate | PoolAlert) -> None:
    """The one way to send to browsers: queued until the surrounding transaction commits."""
    transaction.on_commit(lambda: _send(group, payload))


def _send(group: str, payload: SessionUpdate | PoolAlert) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        async_to_sync(layer.group_send)(group, dict(payload))
    except Exception:  # a page missing one update refreshes on the next; never fail the write
        log.exception("could not send %s to %s", payload["type"], group)


def broadcast_session(session_id: int) -> None:
    """Send a session's current state to its owner's open pages (after commit)."""
    from scheduling.models import Session

    from .api.serializers import SessionSerializer

    session = (
        Session.objects.select_related("profile", "node", "user")
        .prefetch_related("allocations__slice__gpu")
        .filter(pk=session_id)
        .first()
    )
    if session is None:
        return
    payload = SessionUpdate(type="session.update", session=SessionSerializer(session).data)
    send_after_commit(user_group(session.user_id), payload)


def broadcast_pool_alert(level: str, utilisation: float, message: str) -> None:
    """Tell every admin's open pages that the pool crossed a threshold (after commit)."""
    payload = PoolAlert(
        type="pool.alert", level=level, utilisation=round(utilisation, 4), message=message
    )
    send_after_commit(ADMIN_GROUP, payload)
