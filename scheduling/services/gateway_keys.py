"""The gateways' ticket keys (issue 34; docs/agent-protocol.md "Desktop gateway").

A node's key ``k`` is derived from the portal's SECRET_KEY, the node and ``k``
(:func:`ticket_key`): nothing to store, nothing to hand out but in the node's desired state
(:func:`gateway_access`, which carries the current key and, during a rotation, the one before
it, so that a ticket signed a moment before the rotation still opens). Rotating raises
``Node.gateway_key_id`` (:func:`do_rotate_gateway_key`): the key before the previous one is no
longer sent, and the node's gateway forgets it at its next desired state.
"""

from __future__ import annotations

import base64

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils.crypto import salted_hmac

from nodeagent.protocol_gateway import GatewayAccess, GatewayKey

from ..choices import AuditKind
from ..models import Node
from .agent_wake import wake_nodes
from .audit import record

KEY_SALT = "deskpool.gateway-ticket-key"


def ticket_key(node_id: int, key_id: int) -> str:
    """The node's ticket key ``key_id``: base64url of 32 bytes, without padding (43 chars)."""
    digest = salted_hmac(KEY_SALT, f"{node_id}:{key_id}", algorithm="sha256").digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def gateway_access(node: Node) -> GatewayAccess:
    """What the node's gateway needs to check tickets: its keys (the current first) and the
    page origins it lets in (``settings.GATEWAY_ORIGINS``)."""
    current = node.gateway_key_id
    kids = [current, current - 1] if current > 1 else [current]
    return GatewayAccess(
        keys=[GatewayKey(kid=kid, key=ticket_key(node.pk, kid)) for kid in kids],
        origins=list(settings.GATEWAY_ORIGINS),
    )


def do_rotate_gateway_key(node: Node, actor: str, reason: str = "") -> int:
    """Sign the node's tickets with a new key from now on; audited, and the node is woken to
    take it. Returns the new key id."""
    with transaction.atomic():
        Node.objects.filter(pk=node.pk).update(gateway_key_id=F("gateway_key_id") + 1)
        node.refresh_from_db(fields=["gateway_key_id"])
        record(
            AuditKind.NODE_GATEWAY_KEY_ROTATED,
            actor,
            node=node,
            data={
                "old": node.gateway_key_id - 1,
                "new": node.gateway_key_id,
                **({"reason": reason} if reason else {}),
            },
        )
        wake_nodes([node.pk])
    return node.gateway_key_id
