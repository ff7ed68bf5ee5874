"""Failed sign-ins spread over many user names from one address are throttled too (issue 25,
finding 5a): past ``SIGNIN_ADDRESS_FAILURE_LIMIT`` failures within the cool-off, any names,
that address is refused with the lockout's 429 and message; another address is not."""

from __future__ import annotations

import pytest
from django.test import Client
from rest_framework.test import APIClient

from scheduling.choices import AuditKind
from scheduling.models import AuditEvent

from ..signin.slapd import password_of, slapd  # noqa: F401 - the fixture
from ..signin.test_ldap import ldap_signin

pytestmark = pytest.mark.django_db

PAIR_LIMIT = 3
ADDRESS_LIMIT = 5
LOGIN = "/login/"
TOKEN = "/api/v1/auth/token/"


@pytest.fixture(autouse=True)
def _throttling(settings):
    settings.AXES_FAILURE_LIMIT = PAIR_LIMIT
    settings.AXES_COOLOFF_TIME = 0.25  # hours: 15 minutes
    settings.SIGNIN_ADDRESS_FAILURE_LIMIT = ADDRESS_LIMIT


def spray(client, url: str, names: int, start: int = 0) -> list[int]:
    """One wrong password for each of ``names`` different user names."""
    return [
        client.post(url, {"username": f"name{n}", "password": "wrong"}).status_code
        for n in range(start, start + names)
    ]


def test_many_user_names_from_one_address_lock_that_address_out_on_the_login_page(owner):
    attacker = Client(REMOTE_ADDR="10.9.9.9")
    assert spray(attacker, LOGIN, ADDRESS_LIMIT) == [200] * ADDRESS_LIMIT  # the form again

    locked = attacker.post(LOGIN, {"username": "ada", "password": "pw-ada"})  # right one

    assert locked.status_code == 429
    assert locked["Retry-After"] == str(15 * 60)
    page = locked.content.decode()
    assert "Too many failed sign-ins from your address. Try again in 15 minutes, after" in page
    assert 'id="lockout-message"' in page
    events = AuditEvent.objects.filter(kind=AuditKind.SIGNIN_LOCKED_OUT)
    assert [(e.data["scope"], e.address) for e in events] == [("address", "10.9.9.9")]
    assert spray(attacker, LOGIN, 2, start=50) == [429, 429]
    assert events.count() == 1  # audited once per lockout

    neighbour = Client(REMOTE_ADDR="10.9.9.10")
    assert neighbour.post(LOGIN, {"username": "ada", "password": "pw-ada"}).status_code == 302


def test_the_token_endpoint_counts_and_refuses_per_address_too(owner):
    attacker = APIClient(REMOTE_ADDR="10.8.8.8")
    assert spray(attacker, TOKEN, ADDRESS_LIMIT) == [400] * ADDRESS_LIMIT

    locked = attacker.post(TOKEN, {"username": "ada", "password": "pw-ada"}, format="json")

    assert locked.status_code == 429
    assert locked.json()["retry_after"] == 15 * 60
    assert locked.json()["detail"].startswith("Too many failed sign-ins from your address.")
    other = APIClient(REMOTE_ADDR="10.8.8.9")
    assert (
        other.post(TOKEN, {"username": "ada", "password": "pw-ada"}, format="json").status_code
        == 200
    )


def test_the_address_is_the_proxy_aware_client_address(owner, settings):
    settings.TRUSTED_PROXIES = 1
    proxy = "10.0.0.1"
    first = Client(REMOTE_ADDR=proxy, HTTP_X_FORWARDED_FOR="192.0.2.7")
    spray(first, LOGIN, ADDRESS_LIMIT)
    assert first.post(LOGIN, {"username": "x", "password": "y"}).status_code == 429
    second = Client(REMOTE_ADDR=proxy, HTTP_X_FORWARDED_FOR="192.0.2.8")  # same proxy
    assert second.post(LOGIN, {"username": "ada", "password": "pw-ada"}).status_code == 302


def test_a_limit_of_zero_turns_the_address_limit_off(owner, settings):
    settings.SIGNIN_ADDRESS_FAILURE_LIMIT = 0
    client = Client(REMOTE_ADDR="10.7.7.7")
    spray(client, LOGIN, ADDRESS_LIMIT * 2)
    assert client.post(LOGIN, {"username": "ada", "password": "pw-ada"}).status_code == 302


def test_ldap_sign_ins_spread_over_names_lock_the_address_out(slapd, db):  # noqa: F811
    """A real slapd (tests/signin/slapd.py): the directory's accounts go through the same
    count; the right password of a real directory account is refused from that address."""
    with ldap_signin(slapd.uri):
        attacker = Client(REMOTE_ADDR="10.6.6.6")
        assert spray(attacker, LOGIN, ADDRESS_LIMIT) == [200] * ADDRESS_LIMIT
        right = {"username": "lina", "password": password_of("lina")}
        assert attacker.post(LOGIN, right).status_code == 429
        assert Client(REMOTE_ADDR="10.6.6.7").post(LOGIN, right).status_code == 302
