"""Tickets to a node's desktop gateway (issue 34; docs/agent-protocol.md "Desktop gateway").

The portal decides who may open what, exactly as its relays did: the desktop's owner and
admins (``Session.objects.openable_by``), a running desktop, sound only where the desktop
serves some. It then signs a ticket (:mod:`nodeagent.gateway.tickets`) with the node's
current key (:mod:`.gateway_keys`) and keeps a row of it (:class:`GatewayTicket`), which the
gateway's reports later open and close (:mod:`.gateway_events`) and revocation reads
(:mod:`.gateway_revocation`). Issuing is not audited: the open is, when the gateway reports it.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.contrib.auth.models import AnonymousUser, User
from django.db.models import Q
from django.utils.translation import gettext as _

from nodeagent.gateway.codes import GATEWAY_PATHS
from nodeagent.gateway.tickets import (
    TICKET_LIFETIME_S,
    TICKET_VERSION,
    Ticket,
    key_bytes,
    new_ticket_id,
    sign_ticket,
)

from ..choices import OPENABLE_STATES, TERMINAL_STATES
from ..models import GatewayTicket, Session, TicketVia
from . import Conflict, NotFound, ServiceError
from .eligibility import Forbidden
from .gateway_keys import ticket_key
from .node_address import desktop_endpoint

# What a page may ask a ticket for: the screen, the sound, one home file up or down.
ISSUED_PURPOSES = ("screen", "sound", "upload", "download")
TOKEN_MARKER = "token:"  # login_session of a ticket issued to an API token: token:<id>


class NoSound(NotFound):
    """The desktop may be opened, but its image serves no sound."""


@dataclass(frozen=True)
class IssuedTicket:
    ticket: str  # the signed text, for the gateway's first message
    url: str  # where to open it: the node's gateway, the purpose's path
    expires_at: datetime  # not to be opened after


def login_session_hash(login_session: str) -> str:
    """The ticket's ``sin`` claim: a hash of the login session, never the key itself."""
    return hashlib.sha256(login_session.encode()).hexdigest()[:32]


def check_gateway_open(user: User | AnonymousUser, session_id: int, purpose: str) -> Session:
    """The session (with its node) whose ``purpose`` this person may open now through its
    node's gateway; else ServiceError saying why (NotFound, Forbidden, Conflict, NoSound)."""
    if purpose not in ISSUED_PURPOSES:
        raise ServiceError(
            _("Ask for a ticket to the screen, the sound, an upload or a download."),
            field="purpose",
            code="invalid",
        )
    session = Session.objects.openable_by(user).select_related("node").filter(pk=session_id).first()
    if session is None:
        if Session.objects.visible_to(user).filter(pk=session_id).exists():
            raise Forbidden(_("Only the desktop's owner and admins may open it."))
        raise NotFound(_("There is no such desktop."))
    node = session.node
    if session.state not in OPENABLE_STATES or node is None or session.desktop_port is None:
        raise Conflict(_("This desktop is not running; open it once it is."))
    if node.gateway_port is None:
        raise Conflict(
            _("The node of this desktop has no desktop gateway yet; ask an admin to update it.")
        )
    if desktop_endpoint(node.address, node.gateway_port) is None:
        raise Conflict(
            _("The node's address is not one the portal lets browsers reach; ask an admin.")
        )
    if purpose == "sound" and session.desktop_audio_port is None:
        raise NoSound(_("This desktop has no sound."))
    return session


def gateway_url(session: Session, purpose: str) -> str:
    """Where a page opens ``purpose`` of the session: DESKPOOL_GATEWAY_URL filled with the
    node's checked address and its gateway's port, then the purpose's path (for a file,
    http:// or https:// rather than ws:// or wss://)."""
    node = session.node
    assert node is not None and node.gateway_port is not None  # check_gateway_open saw to it
    endpoint = desktop_endpoint(node.address, node.gateway_port)
    if endpoint is None:
        raise Conflict(
            _("The node's address is not one the portal lets browsers reach; ask an admin.")
        )
    ip, port = endpoint
    host = f"[{ip}]" if ":" in ip else ip
    url = settings.GATEWAY_URL.format(address=host, port=port) + GATEWAY_PATHS[purpose]
    if purpose in ("upload", "download"):  # plain HTTP on the same port and route
        for socket, web in (("wss://", "https://"), ("ws://", "http://")):
            if url.startswith(socket):
                return web + url[len(socket) :]
    return url


def do_issue_ticket(
    user: User,
    session: Session,
    purpose: str,
    login_session: str,
    address: str | None,
    path: str = "",
    quota: int = 0,
) -> IssuedTicket:
    """Sign a ticket for ``user`` to open ``purpose`` of ``session`` (as
    :func:`check_gateway_open` returned it) and keep its row. ``login_session``: the Django
    session key it is issued under, or ``token:<id>`` for an API token. Upload and download:
    ``path`` the file in the home (checked by :mod:`.home_transfers`); upload: ``quota`` the
    home's quota in bytes, which the gateway holds the upload to (0: none)."""
    node = session.node
    assert node is not None
    url = gateway_url(session, purpose)
    issued = int(time.time())
    ticket = Ticket(
        v=TICKET_VERSION,
        kid=node.gateway_key_id,
        nid=node.pk,
        sid=session.pk,
        uid=int(user.pk),
        sin=login_session_hash(login_session),
        pur=purpose,
        path=path,
        iat=issued,
        exp=issued + TICKET_LIFETIME_S,
        jti=new_ticket_id(),
        quota=quota,
    )
    text = sign_ticket(ticket, key_bytes(ticket_key(node.pk, ticket.kid)))
    expires_at = datetime.fromtimestamp(ticket.exp, tz=UTC)
    GatewayTicket.objects.create(
        jti=ticket.jti,
        node=node,
        session=session,
        user=user,
        purpose=purpose,
        path=path,
        via=TicketVia.OWNER if session.user_id == user.pk else TicketVia.ADMIN,
        login_session=login_session,
        issued_at=datetime.fromtimestamp(issued, tz=UTC),
        expires_at=expires_at,
        address=(address or "")[:100],
    )
    return IssuedTicket(ticket=text, url=url, expires_at=expires_at)


# Ticket rows are kept this long after they are done with, then purged (the audit trail keeps
# the opens).
KEEP_DONE = timedelta(days=1)


def do_purge_gateway_tickets(now: datetime) -> int:
    """Delete ticket rows done with over a day ago: closed, never opened and expired, or
    opened on a desktop that has ended (its gateway will not report the close). How many."""
    cutoff = now - KEEP_DONE
    done = (
        Q(closed_at__lt=cutoff)
        | Q(opened_at=None, expires_at__lt=cutoff)
        | Q(issued_at__lt=cutoff, session__state__in=TERMINAL_STATES)
    )
    deleted, _counts = GatewayTicket.objects.filter(done).delete()
    return deleted
