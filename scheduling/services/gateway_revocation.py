"""Revoking gateway tickets (issue 34, item 4; docs/agent-protocol.md "Desktop gateway").

Each session in a node's desired state lists its live tickets (not closed; opened, or issued
and not yet expired) whose holder lost the right (:func:`revoked_tickets`): signed out (the
login session they were issued under is gone or no longer theirs, the account disabled, the
API token revoked: ``signed_out``) or no longer allowed to open the desktop (``forbidden``,
``Session.objects.openable_by``). The gateway closes what they opened within its next desired
state, so the node is woken at once (:func:`connect`'s receivers) when:

- a login session is deleted: a logout (``logout()`` flushes it, after ``user_logged_out``,
  which fires too early to see it gone), an admin ending a person's sessions
  (``api_tokens.end_every_session``), an expired one cleared;
- a person is saved: disabled, admin rights given or taken, a new password (their other
  login sessions no longer match; every API token is revoked).

Only the nodes where the person holds live tickets are woken.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

from django.contrib.auth import SESSION_KEY, get_user_model
from django.contrib.sessions.models import Session as LoginSession
from django.db.models.signals import post_delete, post_save

from nodeagent.protocol_gateway import RevokedTicket
from people.login_sessions import signed_in_user
from people.tokens import ApiToken

from ..models import GatewayTicket, Node, Session
from .agent_wake import wake_nodes
from .gateway_tickets import TOKEN_MARKER

Why = Literal["signed_out", "forbidden"]


def revoked_tickets(node: Node, session_ids: Iterable[int]) -> dict[int, list[RevokedTicket]]:
    """Session id -> its node's live tickets whose holder lost the right, with why."""
    live = (
        GatewayTicket.objects.live()
        .filter(node=node, session_id__in=list(session_ids))
        .select_related("user")
        .order_by("pk")
    )
    standing: dict[tuple[str, int], Any] = {}  # (login session, user) -> fresh user or None
    allowed: dict[tuple[int, int], bool] = {}  # (user, session) -> may open
    revoked: dict[int, list[RevokedTicket]] = {}
    for ticket in live:
        why = _why(ticket, standing, allowed)
        if why is not None:
            revoked.setdefault(ticket.session_id, []).append(
                RevokedTicket(ticket=ticket.jti, why=why)
            )
    return revoked


def _why(
    ticket: GatewayTicket,
    standing: dict[tuple[str, int], Any],
    allowed: dict[tuple[int, int], bool],
) -> Why | None:
    sign_in = (ticket.login_session, ticket.user_id)
    if sign_in not in standing:
        standing[sign_in] = _holder(ticket)
    user = standing[sign_in]
    if user is None:
        return "signed_out"
    right = (ticket.user_id, ticket.session_id)
    if right not in allowed:
        allowed[right] = Session.objects.openable_by(user).filter(pk=ticket.session_id).exists()
    return None if allowed[right] else "forbidden"


def _holder(ticket: GatewayTicket) -> Any:
    """The ticket's holder, read afresh, while still signed in as when it was issued."""
    marker = ticket.login_session
    if marker.startswith(TOKEN_MARKER):
        token_id = marker.removeprefix(TOKEN_MARKER)
        live = token_id.isdigit() and (
            ApiToken.objects.live().filter(pk=int(token_id), user_id=ticket.user_id).exists()
        )
        user = ticket.user
        return user if live and user.is_active else None
    if not marker:
        return None  # issued under no sign-in at all: nothing vouches for it
    return signed_in_user(marker, ticket.user_id)


def _nodes_of(tickets: Any) -> list[int]:
    return list(tickets.live().values_list("node_id", flat=True).distinct())


def _login_session_deleted(sender: Any, instance: LoginSession, **kwargs: Any) -> None:
    user_id = instance.get_decoded().get(SESSION_KEY)
    if user_id is None:
        return  # nobody was signed in with it: no tickets were issued under it
    # By its person first: the index of a person's open tickets finds them.
    tickets = GatewayTicket.objects.filter(user_id=user_id, login_session=instance.session_key)
    wake_nodes(_nodes_of(tickets))


def _person_saved(sender: Any, instance: Any, created: bool, **kwargs: Any) -> None:
    fields = kwargs.get("update_fields")
    if created or (fields is not None and set(fields) <= {"last_login"}):
        return  # a sign-in's last_login: nothing that a ticket depends on
    wake_nodes(_nodes_of(GatewayTicket.objects.filter(user_id=instance.pk)))


def connect() -> None:
    """Called once at start (``SchedulingConfig.ready``)."""
    post_delete.connect(
        _login_session_deleted,
        sender=LoginSession,
        dispatch_uid="scheduling.services.gateway_revocation.login_session",
    )
    post_save.connect(
        _person_saved,
        sender=get_user_model(),
        dispatch_uid="scheduling.services.gateway_revocation.person",
    )
