"""``people.login_sessions.signed_in_users`` reads many sign-ins at once (two queries) and gives
each the verdict Django's own ``get_user`` gives its login session, the account active too:
a new password, an expired or deleted session, a session of someone else, a backend no longer
configured and a disabled account each end the sign-in; a session signed in under a fallback
secret key still holds."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from django.contrib.auth import BACKEND_SESSION_KEY, get_user
from django.contrib.auth.models import User
from django.contrib.sessions.backends.db import SessionStore
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext, override_settings
from django.utils import timezone

from people.login_sessions import signed_in_user, signed_in_users

pytestmark = pytest.mark.django_db


def sign_in(user: User) -> str:
    client = Client()
    client.force_login(user)
    return client.cookies["sessionid"].value


def djangos_verdict(key: str, pk: int) -> int | None:
    """What Django's get_user says of the login session (its user's id, or None), the
    account active too (as the sockets require)."""
    user = get_user(SimpleNamespace(session=SessionStore(session_key=key)))  # type: ignore[arg-type]
    ok = user.is_authenticated and user.pk == pk and user.is_active
    return user.pk if ok else None


def test_each_sign_in_gets_djangos_verdict_in_two_queries(make_user):
    people = [make_user(f"p{n}") for n in range(7)]
    keys = [sign_in(p) for p in people]
    # 0 stays signed in; 1 changed their password; 2's session expired; 3's was deleted;
    # 4 is disabled; 5's key is asked with someone else's id; 6 signed in with a backend
    # since removed from the settings.
    people[1].set_password("a brand new one 42")
    people[1].save()
    SessionStore(keys[2]).model.objects.filter(session_key=keys[2]).update(
        expire_date=timezone.now()
    )
    SessionStore(keys[3]).delete()
    User.objects.filter(pk=people[4].pk).update(is_active=False)
    store = SessionStore(keys[6])
    store[BACKEND_SESSION_KEY] = "portal.signin.gone.Backend"
    store.save()
    asked = [(key, p.pk) for key, p in zip(keys, people, strict=True)]
    asked[5] = (keys[5], people[0].pk)
    asked.append((None, people[0].pk))  # no login session (in-process sockets): the user
    asked.append((None, people[4].pk))  # ... while active

    with CaptureQueriesContext(connection) as queries:
        found = signed_in_users(asked)
    assert len(queries) == 2
    got = {pair: (user.pk if user is not None else None) for pair, user in found.items()}
    assert got == {
        asked[0]: people[0].pk,
        asked[1]: None,
        asked[2]: None,
        asked[3]: None,
        asked[4]: None,
        asked[5]: None,
        asked[6]: None,
        (None, people[0].pk): people[0].pk,
        (None, people[4].pk): None,
    }
    for key, pk in asked[:7]:  # Django agrees (its get_user last: it flushes what fails)
        assert djangos_verdict(key, pk) == got[(key, pk)], (key, pk)


def test_a_session_signed_in_under_a_fallback_secret_key_still_holds(make_user):
    person = make_user("pat")
    with override_settings(SECRET_KEY="the-key-of-last-term-" + "x" * 40):
        key = sign_in(person)
    with override_settings(
        SECRET_KEY="the-key-of-this-term-" + "y" * 40,
        SECRET_KEY_FALLBACKS=["the-key-of-last-term-" + "x" * 40],
    ):
        assert signed_in_user(key, person.pk) == person
    with override_settings(SECRET_KEY="the-key-of-this-term-" + "y" * 40):
        assert signed_in_user(key, person.pk) is None  # the old key no longer vouches
