"""One person as a campus identity provider describes them, and the one place that turns
that into a Deskpool account (docs/signin.md).

Every backend (OIDC, CAS, LDAP) builds a :class:`CampusIdentity` from its claims,
attributes or groups and calls :func:`sync_person` on every sign-in: the first one creates
the account (with no usable password), each later one brings the role, the department, the
name and the e-mail up to date. An account with a usable password is a local one (the demo,
a break-glass admin): campus sign-in never takes it over.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.http import HttpRequest
from django.utils.translation import gettext as _

from people.models import Member, Role
from scheduling import locks
from scheduling.services import audit


class SigninRefused(PermissionDenied):
    """The identity provider vouched for someone the portal will not let in."""


# Where a backend leaves the reason of a refusal for the login page that shows it.
_REFUSAL = "signin_refusal"


def refuse(request: HttpRequest | None, message: str) -> SigninRefused:
    """The refusal to raise, its message kept on the request for :func:`refusal_of`."""
    if request is not None:
        setattr(request, _REFUSAL, message)
    return SigninRefused(message)


def refusal_of(request: HttpRequest) -> str:
    """Why this request's campus sign-in was refused ("" when it was not)."""
    return getattr(request, _REFUSAL, "")


@dataclass(frozen=True)
class CampusIdentity:
    username: str
    email: str = ""
    first_name: str = ""
    last_name: str = ""
    groups: tuple[str, ...] = field(default_factory=tuple)
    department: str = ""
    source: str = ""  # "oidc", "cas", "ldap": for the audit trail


def _lower(names: Iterable[str]) -> set[str]:
    return {name.strip().casefold() for name in names if name and name.strip()}


def role_of(groups: Iterable[str]) -> tuple[Role, bool]:
    """(role, is an admin) for these IdP groups: DESKPOOL_SIGNIN_ADMIN_GROUPS make an admin
    (Django staff, a faculty member), DESKPOOL_SIGNIN_FACULTY_GROUPS a faculty member,
    anything else a student."""
    mine = _lower(groups)
    if mine & _lower(settings.SIGNIN_ADMIN_GROUPS):
        return Role.FACULTY, True
    if mine & _lower(settings.SIGNIN_FACULTY_GROUPS):
        return Role.FACULTY, False
    return Role.STUDENT, False


def clean_username(raw: str) -> str:
    """The account name for an IdP's user name, or SigninRefused when it is unusable."""
    username = (raw or "").strip()
    if not username or len(username) > 150:
        raise SigninRefused(_("The campus sign-in gave no usable user name. Ask the help desk."))
    return username


def sync_person(identity: CampusIdentity, user: User | None = None) -> User:
    """Create or update the account for ``identity``; return it.

    ``user``: the account a backend already found or created for this sign-in (the
    libraries create their own), else it is looked up by user name. Raises SigninRefused for
    a local account (usable password) or a disabled one."""
    username = clean_username(identity.username)
    role, is_admin = role_of(identity.groups)
    with transaction.atomic():
        if user is None or user.pk is None:
            user = locks.lock_account(username)
        else:
            user = locks.lock_person(user.pk)
        created = user is None
        if user is None:
            user = User(username=username)
            user.set_unusable_password()
        elif user.has_usable_password():
            raise SigninRefused(
                _("%(username)s is a local account: sign in with its password on this page.")
                % {"username": username}
            )
        elif not user.is_active:
            raise SigninRefused(_("This account is disabled. Ask the help desk."))
        before: dict[str, Any] = {"role": None, "admin": user.is_staff, "department": None}
        user.email = identity.email[:254]
        user.first_name = identity.first_name[:150]
        user.last_name = identity.last_name[:150]
        user.is_staff = is_admin
        user.save()
        member, _created = Member.objects.get_or_create(user=user)
        before["role"], before["department"] = member.role, member.department
        member.role = role
        member.department = identity.department[:100]
        member.save(update_fields=["role", "department"])
        after = {"role": role.value, "admin": is_admin, "department": member.department}
        if created or before != after:
            audit.record(
                "account.created" if created else "account.updated",
                f"signin:{identity.source or 'campus'}",
                data={"username": username, "before": None if created else before, **after},
            )
    return user
