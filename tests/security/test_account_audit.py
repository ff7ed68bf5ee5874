"""Account changes leave audit events (issue 25, finding 5e): API tokens issued (API and the
account page) and revoked, a password changed by its owner, set by an admin or on the console;
never the token or the password in the event."""

from __future__ import annotations

import json

import pytest
from django.test import Client
from django.utils import translation
from rest_framework.test import APIClient

from people.tokens import ApiToken
from scheduling.choices import AuditKind
from scheduling.labels import audit_label
from scheduling.models import AuditEvent

pytestmark = pytest.mark.django_db

NEW_PASSWORD = "a brand new campus passphrase 42"


def events(kind: str) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(kind=kind).order_by("pk"))


def holds_no_secret(event: AuditEvent, *secrets: str) -> bool:
    text = json.dumps(event.data) + event.actor
    return not any(secret in text for secret in secrets)


def test_a_token_asked_for_with_a_password_is_audited_without_the_token(owner):
    answer = APIClient().post(
        "/api/v1/auth/token/",
        {"username": "ada", "password": "pw-ada", "name": "laptop"},
        format="json",
    )
    assert answer.status_code == 200
    [event] = events(AuditKind.API_TOKEN_ISSUED)
    assert event.actor == "user:ada"
    assert event.data["token"] == answer.json()["id"] and event.data["name"] == "laptop"
    assert holds_no_secret(event, answer.json()["token"], "pw-ada")


def test_the_account_page_audits_issuing_and_revoking(owner):
    browser = Client()
    browser.force_login(owner)
    assert browser.post("/account/tokens/", {"name": "scripts"}).status_code == 200
    token = ApiToken.objects.get(user=owner)
    [issued] = events(AuditKind.API_TOKEN_ISSUED)
    assert (issued.actor, issued.data["token"]) == ("user:ada", token.pk)

    assert browser.post(f"/account/tokens/{token.pk}/revoke/").status_code == 302
    [revoked] = events(AuditKind.API_TOKEN_REVOKED)
    assert (revoked.actor, revoked.data["token"]) == ("user:ada", token.pk)
    # revoking it again changes nothing and records nothing
    assert browser.post(f"/account/tokens/{token.pk}/revoke/").status_code == 404
    assert len(events(AuditKind.API_TOKEN_REVOKED)) == 1


def test_revoking_through_the_api_is_audited(owner):
    client = APIClient()
    client.force_login(owner)
    made = client.post("/api/v1/auth/tokens/", {"name": "ci"}, format="json").json()
    assert client.delete(f"/api/v1/auth/tokens/{made['id']}/").status_code == 204
    [revoked] = events(AuditKind.API_TOKEN_REVOKED)
    assert revoked.data == {"token": made["id"], "name": "ci"}
    assert holds_no_secret(revoked, made["token"])


def test_an_admin_setting_a_password_is_audited_as_set_by_the_admin(owner, admin_user):
    browser = Client()
    browser.force_login(admin_user)
    answer = browser.post(
        f"/admin/auth/user/{owner.pk}/password/",
        {"password1": NEW_PASSWORD, "password2": NEW_PASSWORD, "usable_password": "true"},
    )
    assert answer.status_code == 302, answer.content.decode()[:3000]
    [event] = events(AuditKind.PASSWORD_SET)
    assert (event.actor, event.data) == ("user:root", {"username": "ada"})
    assert event.address == "127.0.0.1"
    assert holds_no_secret(event, NEW_PASSWORD)
    assert events(AuditKind.PASSWORD_CHANGED) == []


def test_changing_ones_own_password_is_audited_as_changed(admin_user):
    admin_user.set_password("the old long passphrase 1")
    admin_user.save()
    browser = Client()
    browser.force_login(admin_user)
    answer = browser.post(
        "/admin/password_change/",
        {
            "old_password": "the old long passphrase 1",
            "new_password1": NEW_PASSWORD,
            "new_password2": NEW_PASSWORD,
        },
    )
    assert answer.status_code == 302, answer.content.decode()[:3000]
    [event] = events(AuditKind.PASSWORD_CHANGED)
    assert (event.actor, event.data) == ("user:root", {"username": "root"})
    assert holds_no_secret(event, NEW_PASSWORD, "the old long passphrase 1")


def test_a_password_set_on_the_console_is_audited_as_the_console(owner):
    owner.set_password(NEW_PASSWORD)  # as manage.py changepassword does, outside a request
    owner.save()
    [event] = events(AuditKind.PASSWORD_SET)
    assert (event.actor, event.data, event.address) == ("console", {"username": "ada"}, None)


def test_a_password_hash_upgraded_at_sign_in_is_not_a_change(owner, settings):
    settings.PASSWORD_HASHERS = [
        "django.contrib.auth.hashers.ScryptPasswordHasher",
        *settings.PASSWORD_HASHERS,
    ]
    assert Client().post("/login/", {"username": "ada", "password": "pw-ada"}).status_code == 302
    assert events(AuditKind.PASSWORD_CHANGED) == [] and events(AuditKind.PASSWORD_SET) == []


@pytest.mark.parametrize(
    "kind",
    [
        AuditKind.API_TOKEN_ISSUED,
        AuditKind.API_TOKEN_REVOKED,
        AuditKind.PASSWORD_CHANGED,
        AuditKind.PASSWORD_SET,
    ],
)
def test_the_new_kinds_have_labels_in_english_and_chinese(kind):
    english = str(kind.label)
    with translation.override("zh-hans"):
        chinese = str(kind.label)
        shown = audit_label(kind)
    assert english[0].isupper() and chinese != english
    assert chinese in shown  # the console's words for it
