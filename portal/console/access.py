"""Who may use the admin console (``/console/``): admins (staff) only. Everyone else, signed
in or not, gets 404: the console is not advertised to people who cannot use it."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.http import Http404, HttpRequest, HttpResponse
from django.utils.translation import gettext as _

from portal.kit.navigation import is_admin


def admin_only(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """A console page: 404 for anyone but an admin."""

    @wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not is_admin(request.user):
            raise Http404(_("No such page."))
        return view(request, *args, **kwargs)

    return wrapped
