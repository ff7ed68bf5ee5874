"""Who is asking: the signed-in person behind a request."""

from __future__ import annotations

from django.contrib.auth.models import AnonymousUser, User
from django.core.exceptions import PermissionDenied
from django.utils.translation import gettext as _


def signed_in(user: User | AnonymousUser) -> User:
    """The person, for views that require a login (they never see an anonymous user)."""
    if not isinstance(user, User) or not user.is_authenticated:
        raise PermissionDenied(_("Sign in first."))
    return user
