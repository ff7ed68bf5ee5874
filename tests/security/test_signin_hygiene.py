"""Sign-in hygiene (issue 14, finding 7): throttling and lockout on every password sign-in,
API tokens that expire and can be listed and revoked, and an admin's "end every session".

Through Django's test client and DRF's, as a browser or a script would call the portal.
"""

from __future__ import annotations

from datetime import timedelta

import httpx
import pytest
from axes.models import AccessAttempt
from django.conf import settings
from django.contrib.auth import SESSION_KEY, authenticate, get_user_model
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from people.tokens import ApiToken
from scheduling.choices import AuditKind
from scheduling.models import AuditEvent
from scheduling.services.api_tokens import Ended, end_every_session, issue_token

from ..integration.conftest import database_url
from ..integration.stack import Stack
from ..signin.slapd import password_of, slapd  # noqa: F401 - the fixture
from ..signin.test_ldap import ldap_signin

pytestmark = pytest.mark.django_db

LIMIT = 3
LOGIN = "/login/"
ADMIN_LOGIN = "/admin/login/"
TOKEN = "/api/v1/auth/token/"
TOKENS = "/api/v1/auth/tokens/"


@pytest.fixture(autouse=True)
def _throttling(settings):
    settings.AXES_FAILURE_LIMIT = LIMIT
    settings.AXES_COOLOFF_TIME = 0.25  # hours: 15 minutes


def browser(address: str = "10.1.1.1") -> Client:
    return Client(REMOTE_ADDR=address)


def api(address: str = "10.1.1.1") -> APIClient:
    return APIClient(REMOTE_ADDR=address)


def token_client(plain: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Token " + plain)
    return client


def fail(client: Client, url: str, username: str = "ada", times: int = 1):
    answer = None
    for _ in range(times):
        answer = client.post(url, {"username": username, "password": "wrong"})
    return answer


def signed_in(client: Client) -> bool:
    return SESSION_KEY in client.session


# --- throttling and lockout ---------------------------------------------------------------


def test_login_page_locks_the_name_and_address_out_with_a_page_saying_when(owner):
    client = browser()
    assert fail(client, LOGIN, times=LIMIT - 1).status_code == 200  # the form again
    locked = fail(client, LOGIN)
    assert locked.status_code == 429
    assert locked["Retry-After"] == str(15 * 60)
    assert "Try again in 15 minutes, after" in locked.content.decode()
    assert 'id="lockout-message"' in locked.content.decode()
    # The right password is refused while locked.
    again = client.post(LOGIN, {"username": "ada", "password": "pw-ada"})
    assert again.status_code == 429
    assert not signed_in(client)


def test_the_lock_is_on_the_pair_not_the_address_nor_the_name(owner, stranger):
    fail(browser("10.1.1.1"), LOGIN, times=LIMIT)
    # Another person behind the same campus NAT signs in.
    neighbour = browser("10.1.1.1")
    assert neighbour.post(LOGIN, {"username": "ben", "password": "pw-ben"}).status_code == 302
    assert signed_in(neighbour)
    # Ada herself, from another address.
    elsewhere = browser("10.2.2.2")
    assert elsewhere.post(LOGIN, {"username": "ada", "password": "pw-ada"}).status_code == 302
    # Changing the case of the name does not start a fresh count (LDAP ignores case).
    assert fail(browser("10.1.1.1"), LOGIN, username="ADA ").status_code == 429


def test_a_success_clears_the_count(owner):
    client = browser()
    fail(client, LOGIN, times=LIMIT - 1)
    assert client.post(LOGIN, {"username": "ada", "password": "pw-ada"}).status_code == 302
    client.logout()
    assert fail(client, LOGIN, times=LIMIT - 1).status_code == 200
    assert fail(client, LOGIN).status_code == 429  # counted afresh from the success


def test_admin_login_locks_out_too(admin_user):
    client = browser()
    fail(client, ADMIN_LOGIN, username="root", times=LIMIT - 1)
    locked = fail(client, ADMIN_LOGIN, username="root")
    assert locked.status_code == 429
    assert "Try again in 15 minutes" in locked.content.decode()
    right = client.post(ADMIN_LOGIN, {"username": "root", "password": "pw-root"})
    assert right.status_code == 429
    assert not signed_in(client)


def test_token_endpoint_locks_out_with_429_json(owner):
    client = api()
    for _ in range(LIMIT - 1):
        wrong = client.post(TOKEN, {"username": "ada", "password": "wrong"}, format="json")
        assert wrong.status_code == 400
    locked = client.post(TOKEN, {"username": "ada", "password": "wrong"}, format="json")
    assert locked.status_code == 429
    assert locked["Retry-After"] == str(15 * 60)
    assert locked.json()["retry_after"] == 15 * 60
    assert "Try again in 15 minutes, after" in locked.json()["detail"]
    right = client.post(TOKEN, {"username": "ada", "password": "pw-ada"}, format="json")
    assert right.status_code == 429
    assert "token" not in right.json()
    assert not ApiToken.objects.exists()


def test_a_lockout_is_audited_once(owner):
    fail(browser(), LOGIN, times=LIMIT + 2)
    events = AuditEvent.objects.filter(kind=AuditKind.SIGNIN_LOCKED_OUT)
    assert [(e.actor, e.data["username"], e.data["path"], e.address) for e in events] == [
        ("signin:lockout", "ada", LOGIN, "10.1.1.1")
    ]


# --- API tokens ---------------------------------------------------------------------------


def test_token_endpoint_issues_a_named_token_that_expires_after_the_configured_days(
    owner, settings
):
    settings.API_TOKEN_DAYS = 7
    answer = api().post(
        TOKEN, {"username": "ada", "password": "pw-ada", "name": "laptop"}, format="json"
    )
    assert answer.status_code == 200
    body = answer.json()
    token = ApiToken.objects.get(pk=body["id"])
    assert body["name"] == "laptop" and body["token"].startswith(body["prefix"])
    assert token.expires_at - token.created_at == timedelta(days=7)
    assert token.key_hash != body["token"]  # only a digest is kept
    assert token_client(body["token"]).get("/api/v1/profiles/").status_code == 200


def test_an_expired_token_is_refused_with_401_saying_so(owner, settings):
    settings.API_TOKEN_DAYS = 1
    _, plain = issue_token(owner, now=timezone.now() - timedelta(days=1, minutes=1))
    answer = token_client(plain).get("/api/v1/profiles/")
    assert answer.status_code == 401
    assert "expired" in answer.json()["detail"]


def test_list_and_revoke_own_tokens_but_not_anothers(owner, stranger):
    mine, plain = issue_token(owner, "script")
    other, theirs = issue_token(stranger, "theirs")
    client = token_client(plain)
    listed = client.get(TOKENS)
    assert listed.status_code == 200
    assert [(t["id"], t["name"], t["current"]) for t in listed.json()] == [
        (mine.pk, "script", True)
    ]
    assert client.delete(f"{TOKENS}{other.pk}/").status_code == 404
    assert client.delete(f"{TOKENS}{2**70}/").status_code == 404
    assert token_client(theirs).get(TOKENS).status_code == 200
    assert client.delete(f"{TOKENS}{mine.pk}/").status_code == 204
    refused = client.get(TOKENS)
    assert refused.status_code == 401
    assert "revoked" in refused.json()["detail"]


def test_a_token_cannot_mint_tokens_but_a_signed_in_browser_can(owner):
    _, plain = issue_token(owner)
    assert token_client(plain).post(TOKENS, {"name": "x"}, format="json").status_code == 403
    client = APIClient()
    client.force_login(owner)
    made = client.post(TOKENS, {"name": "from the browser"}, format="json")
    assert made.status_code == 201
    assert token_client(made.json()["token"]).get(TOKENS).status_code == 200


def test_a_password_change_revokes_every_token(owner):
    _, first = issue_token(owner)
    _, second = issue_token(owner)
    owner.set_password("new-password-for-ada")
    owner.save()
    for plain in (first, second):
        assert token_client(plain).get(TOKENS).status_code == 401
    assert ApiToken.objects.filter(user=owner, revoked_at=None).count() == 0


def test_disabling_the_account_revokes_its_tokens_for_good(owner):
    _, plain = issue_token(owner)
    owner.is_active = False
    owner.save()
    owner.is_active = True
    owner.save()
    answer = token_client(plain).get(TOKENS)
    assert answer.status_code == 401
    assert "revoked" in answer.json()["detail"]


def test_the_schema_documents_the_token_errors(admin_user):
    client = Client()
    client.force_login(admin_user)
    paths = client.get("/api/schema/?format=json").json()["paths"]
    assert {"200", "400", "429"} <= set(paths[TOKEN]["post"]["responses"])
    assert {"204", "401", "404"} <= set(paths[TOKENS + "{token_id}/"]["delete"]["responses"])


# --- the admin's "end every session" ------------------------------------------------------


def test_admin_ends_every_session_of_a_person(owner, stranger, admin_user):
    laptop, phone, other = browser("10.0.0.1"), browser("10.0.0.2"), browser("10.0.0.3")
    # Django's test Client.login (no request) still signs in past the lockout backend.
    assert laptop.login(username="ada", password="pw-ada")
    phone.force_login(owner)
    other.force_login(stranger)
    _, plain = issue_token(owner)
    _, theirs = issue_token(stranger)
    assert laptop.get("/").status_code == 200

    admin = Client()
    admin.force_login(admin_user)
    answer = admin.post(
        "/admin/auth/user/",
        {"action": "end_every_session", "_selected_action": [owner.pk]},
        follow=True,
    )
    assert answer.status_code == 200
    assert [str(m) for m in answer.context["messages"]] == [
        "ada: 2 login sessions ended, 1 API tokens revoked."
    ]

    for client in (laptop, phone):
        gone = client.get("/")
        assert gone.status_code == 302 and gone["Location"].startswith("/login/")
    assert token_client(plain).get(TOKENS).status_code == 401
    # Nobody else is signed out.
    assert other.get("/").status_code == 200
    assert token_client(theirs).get(TOKENS).status_code == 200
    event = AuditEvent.objects.get(kind=AuditKind.SESSIONS_ENDED)
    assert event.actor == "user:root"
    assert event.data == {"username": "ada", "sessions": 2, "tokens": 1}


def test_the_account_page_lists_makes_and_revokes_own_tokens(owner, stranger):
    theirs, _ = issue_token(stranger, "not mine")
    client = Client()
    client.force_login(owner)
    assert 'id="api-tokens-link"' in client.get("/account/").content.decode()
    made = client.post("/account/tokens/", {"name": "thesis scripts"})
    assert made.status_code == 200
    page = made.content.decode()
    plain = page.split('<code id="issued-token">')[1].split("</code>")[0]
    assert plain.startswith("dpa_") and "thesis scripts" in page and "not mine" not in page
    token = ApiToken.objects.get(user=owner)
    assert plain not in client.get("/account/tokens/").content.decode()  # shown once
    assert client.post(f"/account/tokens/{theirs.pk}/revoke/").status_code == 404
    assert client.post(f"/account/tokens/{token.pk}/revoke/").status_code == 302
    assert token_client(plain).get(TOKENS).status_code == 401
    assert "thesis scripts" not in client.get("/account/tokens/").content.decode()


def test_sign_ins_without_a_user_name_are_left_to_the_identity_provider(owner, rf):
    """An OIDC or CAS callback (a code or ticket, no user name) that fails is not counted:
    failed callbacks from one address must not lock out everyone behind it."""
    for _ in range(LIMIT + 1):
        assert authenticate(rf.get("/oidc/callback/", REMOTE_ADDR="10.1.1.1"), nonce="x") is None
    assert not AccessAttempt.objects.exists()
    assert fail(browser(), LOGIN).status_code == 200
    assert AccessAttempt.objects.get().username == "ada"


# --- through a real portal process --------------------------------------------------------


@pytest.mark.integration
def test_a_real_portal_throttles_by_environment_and_an_admin_ends_every_session(
    transactional_db, tmp_path
):
    if settings.EMBEDDED:
        pytest.skip("the integration tests need the real Redis: set REDIS_URL")
    people = get_user_model()
    people.objects.create_user("ada", password="pw-ada")
    ben = people.objects.create_user("ben", password="pw-ben")
    extra = {
        "DESKPOOL_SIGNIN_FAILURE_LIMIT": "2",
        "DESKPOOL_SIGNIN_COOLOFF_MINUTES": "1",
        "DESKPOOL_API_TOKEN_DAYS": "3",
    }
    stack = Stack(tmp_path, database_url(), settings.REDIS_URL, extra_env=extra)
    try:
        stack.start_portal()
        with httpx.Client(base_url=stack.url, timeout=10) as client:
            ada = {"username": "ada", "password": "wrong"}
            assert client.post(TOKEN, json=ada).status_code == 400
            locked = client.post(TOKEN, json=ada)
            assert locked.status_code == 429 and locked.headers["Retry-After"] == "60"
            assert "Try again in 1 minute, after" in locked.json()["detail"]
            right = client.post(TOKEN, json={"username": "ada", "password": "pw-ada"})
            assert right.status_code == 429
            issued = client.post(TOKEN, json={"username": "ben", "password": "pw-ben"})
            assert issued.status_code == 200
            token = ApiToken.objects.get(pk=issued.json()["id"])
            assert token.expires_at - token.created_at == timedelta(days=3)
        with httpx.Client(base_url=stack.url, timeout=10) as browser:
            form = browser.get(LOGIN).text
            csrf = form.split('name="csrfmiddlewaretoken" value="')[1].split('"')[0]
            signed = browser.post(
                LOGIN, data={"username": "ben", "password": "pw-ben", "csrfmiddlewaretoken": csrf}
            )
            assert signed.status_code == 302
            assert browser.get("/").status_code == 200
            assert end_every_session(ben, "user:root") == Ended(sessions=1, tokens=1)
            gone = browser.get("/")
            assert gone.status_code == 302 and gone.headers["Location"].startswith(LOGIN)
            headers = {"Authorization": "Token " + issued.json()["token"]}
            assert browser.get(TOKENS, headers=headers).status_code == 401
    finally:
        stack.close(None)


def test_ldap_sign_in_on_the_login_page_locks_out_whatever_the_case_of_the_name(slapd, db):  # noqa: F811
    """A real slapd (tests/signin/slapd.py): the directory ignores case, so does the count."""
    with ldap_signin(slapd.uri):
        client = browser()
        for name in ("lina", "Lina", " LINA")[: LIMIT - 1]:
            assert fail(client, LOGIN, username=name).status_code == 200
        assert fail(client, LOGIN, username="LiNa").status_code == 429
        right = client.post(LOGIN, {"username": "lina", "password": password_of("lina")})
        assert right.status_code == 429 and not signed_in(client)
        assert not get_user_model().objects.filter(username="lina").exists()
        elsewhere = browser("10.9.9.9")
        right = elsewhere.post(LOGIN, {"username": "lina", "password": password_of("lina")})
        assert right.status_code == 302 and signed_in(elsewhere)
