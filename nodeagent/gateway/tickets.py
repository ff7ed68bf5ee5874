"""Gateway tickets: the portal signs, the node's gateway checks, offline. One definition. No Django.

A ticket is ``<claims>.<signature>``, both base64url without padding: the claims are compact
JSON (:class:`Ticket`), the signature HMAC-SHA256 of the claims' base64 text, keyed with the
node's ticket key ``kid`` (:class:`nodeagent.protocol_gateway.GatewayKey`; the portal derives
it from its secret key, the node, and the key's id, and rotates it by raising the id). A
ticket is bound to one node, one session, one person, one purpose (and, for a file, one path)
and one login session (``sin``: a hash, never the session key). It is good for
:data:`TICKET_LIFETIME_S` and once: the gateway remembers every id it took until the ticket
would have expired anyway (:class:`ReplayMemo`).

:func:`check_ticket` refuses with :class:`TicketRefused`, whose ``code`` is the WebSocket
close code the gateway answers with (:mod:`nodeagent.gateway.codes`).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re
import secrets
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import asdict, dataclass

from nodeagent.gateway.codes import (
    CLOSE_TICKET_EXPIRED,
    CLOSE_TICKET_FOREIGN,
    CLOSE_TICKET_INVALID,
    CLOSE_TICKET_REPLAYED,
)
from nodeagent.protocol_gateway import TICKET_ID_PATTERN

TICKET_VERSION = 1
TICKET_LIFETIME_S = 30  # from signing to opening; an open connection lives on
TICKET_MAX_CHARS = 2048  # a longer text is not looked at
CLOCK_SKEW_S = 5  # a ticket signed up to this far in the node's future is still taken
REPLAY_MEMO_MAX = 100_000  # ids remembered at most (a 30 s window: over 3,000 opens a second)
PURPOSES = ("screen", "sound", "upload", "download")


class TicketRefused(Exception):
    """The ticket does not open anything; ``code`` is the close code, the message says why."""

    def __init__(self, code: int, why: str) -> None:
        super().__init__(why)
        self.code = code


@dataclass(frozen=True)
class Ticket:
    """A ticket's claims."""

    v: int  # TICKET_VERSION
    kid: int  # the key that signed it
    nid: int  # the node
    sid: int  # the session
    uid: int  # the person
    sin: str  # a hash of the login session it was issued to
    pur: str  # what it opens: one of PURPOSES
    path: str  # for upload and download: the file, relative to the home; else ""
    iat: int  # issued at (Unix seconds)
    exp: int  # not to be opened after (Unix seconds)
    jti: str  # its id, 128 random bits
    quota: int = 0  # for upload: the home's quota in bytes (0: none)


def new_ticket_id() -> str:
    return base64.urlsafe_b64encode(secrets.token_bytes(16)).rstrip(b"=").decode()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def key_bytes(key: str) -> bytes:
    """A :class:`~nodeagent.protocol_gateway.GatewayKey`'s key, as bytes."""
    return _unb64(key)


def _signature(key: bytes, claims_text: str) -> str:
    return _b64(hmac.new(key, claims_text.encode("ascii"), hashlib.sha256).digest())


def sign_ticket(ticket: Ticket, key: bytes) -> str:
    """The ticket's text, signed with ``key`` (the node's key ``ticket.kid``)."""
    claims_text = _b64(json.dumps(asdict(ticket), separators=(",", ":")).encode())
    return f"{claims_text}.{_signature(key, claims_text)}"


def _claims(text: str) -> Ticket:
    """The claims of a ticket's text, unchecked but well formed; TicketRefused if not."""
    if len(text) > TICKET_MAX_CHARS or text.count(".") != 1:
        raise TicketRefused(CLOSE_TICKET_INVALID, "not a ticket")
    claims_text, _signature_text = text.split(".")
    try:
        raw = json.loads(_unb64(claims_text))
        ticket = Ticket(**raw)
    except (ValueError, TypeError, binascii.Error) as error:
        raise TicketRefused(CLOSE_TICKET_INVALID, "not a ticket") from error
    ints = (
        ticket.v,
        ticket.kid,
        ticket.nid,
        ticket.sid,
        ticket.uid,
        ticket.iat,
        ticket.exp,
        ticket.quota,
    )
    if (
        not all(type(n) is int for n in ints)
        or ticket.quota < 0
        or not all(isinstance(s, str) for s in (ticket.sin, ticket.pur, ticket.path, ticket.jti))
    ):
        raise TicketRefused(CLOSE_TICKET_INVALID, "not a ticket")
    if ticket.v != TICKET_VERSION or ticket.pur not in PURPOSES:
        raise TicketRefused(CLOSE_TICKET_INVALID, "a ticket of another kind")
    if not re.fullmatch(TICKET_ID_PATTERN, ticket.jti):
        raise TicketRefused(CLOSE_TICKET_INVALID, "not a ticket")
    return ticket


class ReplayMemo:
    """The ids of the tickets taken, until each would have expired; bounded."""

    def __init__(self, limit: int = REPLAY_MEMO_MAX) -> None:
        self.limit = limit
        self.taken: OrderedDict[str, int] = OrderedDict()  # id -> exp, in the order taken

    def take(self, ticket: Ticket, now: float) -> bool:
        """Remember the ticket; False if it was taken before."""
        while self.taken and next(iter(self.taken.values())) + CLOCK_SKEW_S < now:
            self.taken.popitem(last=False)
        if ticket.jti in self.taken:
            return False
        if len(self.taken) >= self.limit:
            # Full of live tickets: refusing a new one is safer than forgetting a live one.
            return False
        self.taken[ticket.jti] = ticket.exp
        return True


def check_ticket(
    text: str,
    *,
    keys: Mapping[int, bytes],
    node_id: int,
    purpose: str,
    memo: ReplayMemo,
    now: float | None = None,
) -> Ticket:
    """The ticket's claims if it opens ``purpose`` on this node now; else TicketRefused. Takes
    it (once): a second check of the same ticket is refused as replayed."""
    now = time.time() if now is None else now
    ticket = _claims(text)
    # Another node's ticket is signed with that node's key, which this one does not hold: say
    # it is misdirected before the signature (refusing on unchecked claims opens nothing).
    if ticket.nid != node_id:
        raise TicketRefused(CLOSE_TICKET_FOREIGN, "a ticket for another node")
    key = keys.get(ticket.kid)
    if key is None:
        raise TicketRefused(CLOSE_TICKET_FOREIGN, "signed with a key this node does not hold")
    claims_text, signature = text.split(".")
    if not hmac.compare_digest(signature, _signature(key, claims_text)):
        raise TicketRefused(CLOSE_TICKET_INVALID, "the signature does not match")
    if ticket.pur != purpose:
        raise TicketRefused(CLOSE_TICKET_FOREIGN, f"a ticket for {ticket.pur}, not {purpose}")
    if ticket.exp < now or ticket.iat > now + CLOCK_SKEW_S:
        raise TicketRefused(CLOSE_TICKET_EXPIRED, "the ticket has expired")
    if not memo.take(ticket, now):
        raise TicketRefused(CLOSE_TICKET_REPLAYED, "the ticket was used before")
    return ticket
