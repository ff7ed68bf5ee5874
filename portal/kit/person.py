"""Who is asking: the signed-in person behind a request, in one place for every face.

- Page views take the person as an argument: ``@with_person`` is ``login_required`` (the
  login page for anyone signed out) and hands the view ``(request, person, ...)``.
- API views mix in :class:`PersonMixin` and read ``self.person``; DRF's permission classes
  have already refused anyone signed out (401).
- Anything else (a form, a consumer) calls :func:`signed_in` on the user it holds.
- :func:`actor_of`: the person acting, as the audit trail names them.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any, Concatenate, ParamSpec

from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import AnonymousUser, User
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.utils.translation import gettext as _

P = ParamSpec("P")


def signed_in(user: User | AnonymousUser) -> User:
    """The person, for code that requires a login (it never sees an anonymous user)."""
    if not isinstance(user, User) or not user.is_authenticated:
        raise PermissionDenied(_("Sign in first."))
    return user


def with_person(
    view: Callable[Concatenate[HttpRequest, User, P], HttpResponse],
) -> Callable[Concatenate[HttpRequest, P], HttpResponse]:
    """A page for signed-in people: the login page for anyone else; the view gets the person
    after the request."""

    @wraps(view)
    def wrapped(request: HttpRequest, *args: P.args, **kwargs: P.kwargs) -> HttpResponse:
        return view(request, signed_in(request.user), *args, **kwargs)

    return login_required(wrapped)


class PersonMixin:
    """For DRF views: ``self.person`` is the signed-in person asking."""

    request: Any

    @property
    def person(self) -> User:
        return signed_in(self.request.user)


def actor_of(request: HttpRequest) -> str:
    """The admin acting, as the audit trail names them."""
    return f"user:{request.user.get_username()}"
