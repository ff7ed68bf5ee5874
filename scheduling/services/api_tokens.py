"""API tokens and login sessions: issue, check, list, revoke, end them all (docs/security.md).

A token is ``dpa_`` and 40 random characters; only its SHA-256 is stored (the same digest
as nodes' join tokens, ``scheduling.models.hash_token``). It expires ``API_TOKEN_DAYS`` after
it is issued. Issuing and revoking are audited (scheduling.services.account_audit). A person
lists and revokes their own; a password change or a disabled account revokes them all
(people.tokens); an admin ends every login session and every token of a person at once
(``end_every_session``), audited.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.auth.models import User
from django.contrib.sessions.models import Session
from django.db import transaction
from django.utils import timezone
from django.utils.formats import date_format
from django.utils.translation import gettext as _

from people.tokens import ApiToken, ApiTokenQuerySet
from scheduling.choices import AuditKind
from scheduling.models import hash_token
from scheduling.services.account_audit import record_token_issued, record_token_revoked
from scheduling.services.audit import record

TOKEN_PREFIX = "dpa_"
NAME_MAX = 100
# last_used_at is written at most this often per token (a busy script must not write a row
# on every request).
LAST_USED_STEP = timedelta(minutes=1)
# Larger ids name no row (and would overflow the database's bigint).
MAX_ID = 2**63 - 1


class TokenRefused(Exception):
    """A token that does not sign anyone in; the message says why."""


@dataclass(frozen=True)
class Ended:
    sessions: int
    tokens: int


def issue_token(user: User, name: str = "", now: datetime | None = None) -> tuple[ApiToken, str]:
    """A new token for ``user``: the row and the plain token, which is not kept anywhere."""
    now = now or timezone.now()
    plain = TOKEN_PREFIX + secrets.token_urlsafe(30)
    token = ApiToken.objects.create(
        user=user,
        name=name.strip()[:NAME_MAX],
        key_hash=hash_token(plain),
        prefix=plain[: len(TOKEN_PREFIX) + 4],
        created_at=now,
        expires_at=now + timedelta(days=settings.API_TOKEN_DAYS),
    )
    record_token_issued(token)
    return token, plain


def check_token(plain: str, now: datetime | None = None) -> ApiToken:
    """The live token ``plain`` names, its use noted; else ``TokenRefused`` saying why."""
    now = now or timezone.now()
    # The person's saved preferences come with them (apply_preferences reads them next).
    # The hash is unique: no sort (``first()`` sorts, and over this many selected columns
    # Django's sort took about half of the look-up's CPU).
    found = (
        ApiToken.objects.select_related("user", "user__member")
        .filter(key_hash=hash_token(plain))
        .order_by()
    )
    token = next(iter(found), None)
    if token is None:
        raise TokenRefused(_("Invalid token."))
    if token.revoked_at is not None:
        raise TokenRefused(_("This API token was revoked. Ask for a new one."))
    if token.expires_at <= now:
        raise TokenRefused(
            _("This API token expired on %(date)s. Ask for a new one.")
            % {"date": date_format(timezone.localtime(token.expires_at), "DATETIME_FORMAT")}
        )
    if not token.user.is_active:
        raise TokenRefused(_("User inactive or deleted."))
    if token.last_used_at is None or now - token.last_used_at >= LAST_USED_STEP:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        token.last_used_at = now
    return token


def tokens_of(user: User, now: datetime | None = None) -> ApiTokenQuerySet:
    """The person's tokens that still work, newest first."""
    return ApiToken.objects.filter(user=user).live(now)


def revoke_own(user: User, token_id: int) -> bool:
    """Revoke one of the person's own live tokens; False when they have none by that id."""
    if not 0 < token_id <= MAX_ID:
        return False
    token = ApiToken.objects.filter(user=user, pk=token_id).live().first()
    if token is None or ApiToken.objects.filter(pk=token.pk).revoke() != 1:
        return False
    record_token_revoked(token)
    return True


def _session_keys_of(user: User, now: datetime) -> list[str]:
    wanted = str(user.pk)
    return [
        session.session_key
        for session in Session.objects.filter(expire_date__gt=now).iterator()
        if str(session.get_decoded().get("_auth_user_id", "")) == wanted
    ]


def end_every_session(user: User, actor: str, now: datetime | None = None) -> Ended:
    """Sign the person out of every browser (their login sessions, so the nodes' gateways
    close what was opened on tickets issued under them: :mod:`.gateway_revocation`) and
    revoke every API token they hold; audited."""
    now = now or timezone.now()
    with transaction.atomic():
        keys = _session_keys_of(user, now)
        Session.objects.filter(session_key__in=keys).delete()
        tokens = ApiToken.objects.filter(user=user).revoke(now)
        record(
            AuditKind.SESSIONS_ENDED,
            actor,
            data={"username": user.get_username(), "sessions": len(keys), "tokens": tokens},
            at=now,
        )
    return Ended(sessions=len(keys), tokens=tokens)
