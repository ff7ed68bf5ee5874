"""Sessions and cross-site requests (docs/security.md, ASVS level 2, V3 and 4.2.2/13.2.3):
a new session key at sign-in, logout that ends the old one, a password change that ends
the other sign-ins, the cookie's flags and lifetime, CSRF on every cookie-authenticated
POST, and the local password rules."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.contrib.auth.password_validation import validate_password
from django.contrib.sessions.models import Session as LoginSession
from django.core.exceptions import ValidationError
from django.test import Client

from scheduling.models import Session
from scheduling.services.api_tokens import issue_token

pytestmark = pytest.mark.django_db
PASSWORD = "a long enough campus passphrase"


@pytest.fixture
def person(make_user):
    user = make_user("sessy")
    user.set_password(PASSWORD)
    user.save()
    return user


def sign_in(client: Client) -> None:
    answer = client.post("/login/", {"username": "sessy", "password": PASSWORD})
    assert answer.status_code == 302, answer.content


def test_signing_in_gives_a_new_session_key_and_logout_ends_it(person):
    browser = Client()
    browser.get("/login/")
    browser.session.save()  # an anonymous session exists before the sign-in
    before = browser.session.session_key
    sign_in(browser)
    after = browser.cookies[settings.SESSION_COOKIE_NAME].value
    assert after != before
    assert LoginSession.objects.filter(session_key=after).exists()

    assert browser.post("/logout/").status_code == 302
    assert not LoginSession.objects.filter(session_key=after).exists()
    stale = Client()
    stale.cookies[settings.SESSION_COOKIE_NAME] = after
    assert stale.get("/").status_code == 302  # to the login page


def test_a_password_change_ends_the_other_sign_ins(person):
    laptop, phone = Client(), Client()
    sign_in(laptop)
    sign_in(phone)
    assert phone.get("/").status_code == 200
    person.set_password("another long campus passphrase")
    person.save()
    assert phone.get("/").status_code == 302


def test_the_session_cookie_is_httponly_samesite_and_lasts_twelve_hours(person):
    browser = Client()
    sign_in(browser)
    cookie = browser.cookies[settings.SESSION_COOKIE_NAME]
    assert cookie["httponly"] is True
    assert cookie["samesite"] == "Lax"
    assert int(cookie["max-age"]) == 12 * 3600


def test_cookie_authenticated_posts_need_the_csrf_token(person, profile):
    browser = Client(enforce_csrf_checks=True)
    sign_in_page = browser.get("/login/")
    token = sign_in_page.cookies["csrftoken"].value
    signed_in = browser.post(
        "/login/", {"username": "sessy", "password": PASSWORD, "csrfmiddlewaretoken": token}
    )
    assert signed_in.status_code == 302
    form = {"profile": profile.pk, "purpose": "hobby"}
    assert browser.post("/sessions/new/", form).status_code == 403
    assert browser.post("/api/v1/sessions/", form).status_code == 403  # the API, by cookie
    assert not Session.objects.exists()


def test_a_token_client_needs_no_csrf_token(person, profile):
    _token, plain = issue_token(person, name="script")
    api = Client(enforce_csrf_checks=True, HTTP_AUTHORIZATION=f"Token {plain}")
    answer = api.post(
        "/api/v1/sessions/",
        {"profile": profile.pk, "purpose": "hobby"},
        content_type="application/json",
    )
    assert answer.status_code == 201, answer.content


@pytest.mark.parametrize("password", ["short1", "password123456", "123456789012345", "sessy-sessy"])
def test_local_passwords_are_checked(person, password):
    with pytest.raises(ValidationError):
        validate_password(password, user=person)
