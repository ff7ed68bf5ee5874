"""What a node's gateway reports about the tickets it took (issue 34; ``POST gateway-events/``):
the open is audited as the portal's relays audited it, the input counted for idle detection,
the close recorded. A node is trusted only for itself: an event naming another node's ticket,
an unknown one, or one whose session or purpose differs from the ticket's, is ignored.

An agent may send a batch again (its answer lost): opening and closing are each applied once
per ticket (a conditional UPDATE whose row count says whether this was the first), so the
audit row, the viewer count and the close are not doubled.
"""

from __future__ import annotations

from collections.abc import Sequence

from django.db import transaction

from nodeagent.protocol_gateway import TRANSFER_DONE, GatewayEvent

from ..choices import AuditKind
from ..models import GatewayTicket, Node
from . import session_activity
from .audit import record

# A home file's transfer that went through whole is audited as the Files page's tasks were.
_TRANSFERS = {"upload": AuditKind.HOME_UPLOADED, "download": AuditKind.HOME_DOWNLOADED}


def do_gateway_events(node: Node, events: Sequence[GatewayEvent]) -> int:
    """Apply the node's events in order; how many were about its own tickets."""
    tickets = {
        ticket.jti: ticket
        for ticket in GatewayTicket.objects.filter(
            node=node, jti__in={event.ticket for event in events}
        ).select_related("user")
    }
    recorded = 0
    with transaction.atomic():
        for event in events:
            ticket = tickets.get(event.ticket)
            if (
                ticket is None
                or ticket.session_id != event.session_id
                or ticket.purpose != event.purpose
            ):
                continue
            _apply(ticket, event, node)
            recorded += 1
    return recorded


def _apply(ticket: GatewayTicket, event: GatewayEvent, node: Node) -> None:
    if event.kind == "opened":
        first = GatewayTicket.objects.filter(pk=ticket.pk, opened_at=None).update(
            opened_at=event.at, address=event.address
        )
        if first:
            ticket.opened_at = event.at
            _audit_open(ticket, event.address or None)
        return
    if event.kind == "input":
        _count_input(ticket, event)
        return
    first = GatewayTicket.objects.filter(pk=ticket.pk, closed_at=None).update(closed_at=event.at)
    if not first:
        return
    _count_input(ticket, event)
    if ticket.purpose == "screen" and ticket.opened_at is not None:
        session_activity.viewer_closed(ticket.session_id, event.at)
    if ticket.purpose in _TRANSFERS and event.reason == TRANSFER_DONE:
        record(
            _TRANSFERS[ticket.purpose],
            f"user:{ticket.user.get_username()}",
            session=ticket.session_id,
            node=node,
            data={
                "path": ticket.path,
                "size": event.bytes_in if ticket.purpose == "upload" else event.bytes_out,
                "node": node.hostname,
                "ticket": ticket.jti,
            },
        )


def _audit_open(ticket: GatewayTicket, address: str | None) -> None:
    if ticket.purpose == "screen":
        # One more viewer too (idle detection), as the screen relay counted it.
        session_activity.do_open_viewer(ticket.session_id, ticket.user, address)
    elif ticket.purpose == "sound":
        session_activity.do_open_sound(ticket.session_id, ticket.user, address)


def _count_input(ticket: GatewayTicket, event: GatewayEvent) -> None:
    if event.input_events:
        at = event.input_at or event.at
        session_activity.record_input(ticket.session_id, event.input_events, at)
