"""``manage.py create_join_token``: bound, expiring tokens, as the console makes them."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from scheduling.models import JoinToken, Node, hash_token

pytestmark = pytest.mark.django_db


def make(*args: str) -> JoinToken:
    out = StringIO()
    call_command("create_join_token", *args, stdout=out)
    return JoinToken.objects.get(token_hash=hash_token(out.getvalue().strip()))


def test_a_token_is_bound_and_expires_in_a_day_by_default():
    token = make("--hostname", "gpu-a01")
    assert (token.hostname, token.may_replace) == ("gpu-a01", False)
    left = token.expires_at - timezone.now()
    assert timedelta(hours=23, minutes=59) < left <= timedelta(hours=24)


def test_an_unbound_token_must_be_asked_for_and_a_bad_lifetime_is_refused():
    with pytest.raises(CommandError, match="hostname"):
        make()
    assert make("--any-host").hostname == ""
    with pytest.raises(CommandError, match="720"):
        make("--hostname", "gpu-a01", "--hours", "1000")


def test_replace_if_registered_replaces_only_a_registered_node():
    assert make("--hostname", "gpu-a01", "--replace-if-registered").may_replace is False
    Node.objects.create(hostname="gpu-a01")
    assert make("--hostname", "gpu-a01", "--replace-if-registered").may_replace is True
