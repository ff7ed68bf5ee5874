"""Tickets as the gateway checks them (nodeagent.gateway.tickets): every refusal has its code,
and no input, however shaped, raises anything but TicketRefused."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nodeagent.gateway.codes import (
    CLOSE_TICKET_EXPIRED,
    CLOSE_TICKET_FOREIGN,
    CLOSE_TICKET_INVALID,
    CLOSE_TICKET_REPLAYED,
)
from nodeagent.gateway.tickets import (
    CLOCK_SKEW_S,
    ReplayMemo,
    Ticket,
    TicketRefused,
    check_ticket,
    new_ticket_id,
    sign_ticket,
)
from tests.nodeagent.gateway.gateway_process import KEY_ID, NODE_ID, ticket_for

KEY = b"k" * 32
KEYS = {KEY_ID: KEY}
NOW = 1_800_000_000.0


def check(text: str, memo: ReplayMemo | None = None, **options: Any) -> Ticket:
    arguments: dict[str, Any] = {
        "keys": KEYS,
        "node_id": NODE_ID,
        "purpose": "screen",
        "memo": memo if memo is not None else ReplayMemo(),
        "now": NOW,
    }
    arguments.update(options)
    return check_ticket(text, **arguments)


def ticket(**overrides: Any) -> str:
    claims: dict[str, Any] = {"iat": int(NOW), "exp": int(NOW) + 30}
    claims.update(overrides)
    return ticket_for(KEY, 5, **claims)[0]


def refused_with(text: str, **options: Any) -> int:
    with pytest.raises(TicketRefused) as refused:
        check(text, **options)
    return refused.value.code


def encode(claims: Any) -> str:
    return base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()


def test_a_good_ticket_opens_once_and_gives_its_claims() -> None:
    memo = ReplayMemo()
    text = ticket()
    claims = check(text, memo)
    assert (claims.sid, claims.nid, claims.pur, claims.uid) == (5, NODE_ID, "screen", 11)
    assert refused_with(text, memo=memo) == CLOSE_TICKET_REPLAYED


def test_a_forged_signature_is_invalid() -> None:
    claims, _signature = ticket().split(".")
    assert refused_with(f"{claims}.{ticket().split('.')[1]}") == CLOSE_TICKET_INVALID
    other = ticket_for(b"x" * 32, 5, iat=int(NOW), exp=int(NOW) + 30)[0]
    assert refused_with(other) == CLOSE_TICKET_INVALID


def test_changed_claims_under_the_old_signature_are_invalid() -> None:
    claims_text, signature = ticket().split(".")
    claims = json.loads(base64.urlsafe_b64decode(claims_text + "=" * (-len(claims_text) % 4)))
    claims["sid"] = 6
    assert refused_with(f"{encode(claims)}.{signature}") == CLOSE_TICKET_INVALID


def test_a_key_id_the_node_does_not_hold_is_foreign() -> None:
    assert refused_with(ticket(kid=KEY_ID + 1)) == CLOSE_TICKET_FOREIGN


def test_a_ticket_for_another_node_is_foreign() -> None:
    assert refused_with(ticket(nid=NODE_ID + 1)) == CLOSE_TICKET_FOREIGN


def test_a_ticket_for_another_purpose_is_foreign() -> None:
    assert refused_with(ticket(pur="sound")) == CLOSE_TICKET_FOREIGN
    assert refused_with(ticket(), purpose="download") == CLOSE_TICKET_FOREIGN


def test_an_expired_ticket_is_refused_as_expired() -> None:
    now = int(NOW)
    assert refused_with(ticket(iat=now - 60, exp=now - 1)) == CLOSE_TICKET_EXPIRED
    assert check(ticket(iat=now - 30, exp=now)).exp == now  # good up to its last second


def test_a_ticket_issued_in_the_future_is_refused_beyond_the_clock_skew() -> None:
    now = int(NOW)
    too_early = ticket(iat=now + CLOCK_SKEW_S + 1, exp=now + 60)
    assert refused_with(too_early) == CLOSE_TICKET_EXPIRED
    assert check(ticket(iat=now + CLOCK_SKEW_S, exp=now + 60)).iat == now + CLOCK_SKEW_S


def test_a_replay_is_refused_until_long_after_the_ticket_expired() -> None:
    memo = ReplayMemo()
    text = ticket()
    check(text, memo)
    # Within its life (and the skew past it) the id is remembered...
    assert refused_with(text, memo=memo, now=NOW + 30) == CLOSE_TICKET_REPLAYED
    # ...and after that the ticket is expired anyway.
    assert refused_with(text, memo=memo, now=NOW + 60) == CLOSE_TICKET_EXPIRED


def test_the_memo_is_bounded_and_refuses_rather_than_forgets_a_live_ticket() -> None:
    memo = ReplayMemo(limit=3)
    texts = [ticket() for _ in range(4)]
    for text in texts[:3]:
        check(text, memo)
    assert refused_with(texts[3], memo=memo) == CLOSE_TICKET_REPLAYED
    assert len(memo.taken) == 3
    # Once the first three have expired (and the skew passed) they make room.
    later = NOW + 30 + CLOCK_SKEW_S + 1
    fresh = ticket_for(KEY, 5, iat=int(later), exp=int(later) + 30)[0]
    check(fresh, memo, now=later)
    assert len(memo.taken) == 1


GARBAGE = [
    "",
    ".",
    "..",
    "a.b",
    "a.b.c",
    "x" * 5000,
    "%%%.%%%",
    encode([1, 2, 3]) + ".sig",
    encode("text") + ".sig",
    encode(None) + ".sig",
    encode({}) + ".sig",
    encode({"v": 1}) + ".sig",
    "\x00.\x00",
    "é.ü",
    "eyJ2IjoxfQ.",
]


@pytest.mark.parametrize("text", GARBAGE)
def test_garbage_is_refused_as_invalid(text: str) -> None:
    assert refused_with(text) == CLOSE_TICKET_INVALID


def well_formed_claims() -> dict[str, Any]:
    return {
        "v": 1,
        "kid": KEY_ID,
        "nid": NODE_ID,
        "sid": 5,
        "uid": 11,
        "sin": "s",
        "pur": "screen",
        "path": "",
        "iat": int(NOW),
        "exp": int(NOW) + 30,
        "jti": new_ticket_id(),
    }


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=10,
)


@settings(max_examples=300, deadline=None)
@given(field=st.sampled_from(sorted(well_formed_claims())), value=JSON)
def test_any_value_in_any_claim_signed_with_the_key_never_raises_other_errors(
    field: str, value: Any
) -> None:
    claims = well_formed_claims()
    claims[field] = value
    claims_text = encode(claims)
    # Signed properly: only the claims' shapes can be wrong.
    signature = base64.urlsafe_b64encode(
        hmac.new(KEY, claims_text.encode(), hashlib.sha256).digest()
    ).rstrip(b"=")
    try:
        check(f"{claims_text}.{signature.decode()}")
    except TicketRefused as refused:
        assert refused.code in {
            CLOSE_TICKET_INVALID,
            CLOSE_TICKET_FOREIGN,
            CLOSE_TICKET_EXPIRED,
        }


@settings(max_examples=300, deadline=None)
@given(text=st.text(max_size=300) | st.binary(max_size=300).map(lambda b: b.decode("latin-1")))
def test_any_text_is_refused_with_a_ticket_code(text: str) -> None:
    with pytest.raises(TicketRefused) as refused:
        check(text)
    assert refused.value.code in {CLOSE_TICKET_INVALID, CLOSE_TICKET_FOREIGN}


def test_a_ticket_signed_by_the_portal_helper_checks_here() -> None:
    claims = Ticket(**well_formed_claims())
    assert check(sign_ticket(claims, KEY)) == claims
