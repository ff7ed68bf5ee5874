"""What every page's navigation needs to know about the person."""

from __future__ import annotations

from django.http import HttpRequest
from django.utils.functional import SimpleLazyObject

from .console_access import CONSOLE_PAGES, is_admin
from .teaching import teaching_courses


def navigation(request: HttpRequest) -> dict[str, object]:
    """``teaches``: whether to show the Courses link (teachers, TAs and admins); computed
    only when a template reads it. ``console_pages``: the console's navigation, for admins."""
    user = getattr(request, "user", None)

    def teaches() -> bool:
        if user is None or not user.is_authenticated:
            return False
        return bool(user.is_staff or teaching_courses(user).exists())

    return {
        "teaches": SimpleLazyObject(teaches),
        "console_pages": CONSOLE_PAGES if is_admin(user) else [],
        # What static/deskpool/console_live.js listens to (portal/routing.py).
        "console_live": {"updates_url": "/ws/updates/"},
    }
