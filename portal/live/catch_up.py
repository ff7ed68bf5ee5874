"""A page's catch-up through its updates socket (``/ws/updates/?sessions=12,15``).

A page shows session cards rendered when it was served; what changed before its socket
opened, or while the socket was down, would be missed. So the page names the cards it shows
when it opens the socket (``static/deskpool/live_socket.js``, ``updatesPath``), and the socket
first sends each of them as it is now, as a live update carries it, then every change. The
page makes no request of its own to catch up: at a class start, one round trip fewer for
each student, behind the class's form posts.

The socket joins the person's group before it reads the sessions, and a consumer handles
one message at a time: an update sent after the read reaches the page after the catch-up.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from urllib.parse import parse_qs

from django.contrib.auth.models import AnonymousUser, User

from nodeagent.gateway.codes import CATCH_UP_MAX
from scheduling.events import SessionPayload, payload_reads, session_payload
from scheduling.models import Session

SESSION_ID = re.compile(r"[1-9][0-9]{0,17}")  # a positive id that fits the column


def asked_sessions(query_string: bytes) -> tuple[int, ...] | None:
    """The session ids ``?sessions=`` names (comma-separated, at most CATCH_UP_MAX, each
    once); () without the parameter; None for anything else (a bad request)."""
    asked = parse_qs(query_string.decode("latin-1"), keep_blank_values=True).get("sessions")
    if asked is None:
        return ()
    parts = asked[0].split(",") if len(asked) == 1 else []
    if not 0 < len(parts) <= CATCH_UP_MAX or not all(SESSION_ID.fullmatch(p) for p in parts):
        return None
    return tuple(dict.fromkeys(int(part) for part in parts))


def visible_payloads(user: User | AnonymousUser, ids: Sequence[int]) -> list[SessionPayload]:
    """Those of the sessions the person may see, as a live update carries them, in the order
    asked (:meth:`~scheduling.models.sessions.SessionQuerySet.seen_by`: their own without the
    grants query). An id they may not see is left out, as one that does not exist."""
    found = payload_reads(Session.objects.all()).seen_by(user, ids)
    return [session_payload(found[pk]) for pk in ids if pk in found]
