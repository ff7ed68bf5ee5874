"""What every page's navigation needs to know about the person."""

from __future__ import annotations

from functools import cache

from django.http import HttpRequest
from django.utils.functional import SimpleLazyObject

from scheduling.services.quota_requests import pending_to_answer

from .console_access import CONSOLE_PAGES, is_admin
from .teaching import teaching_courses


def navigation(request: HttpRequest) -> dict[str, object]:
    """``teaches``: whether to show the Courses link (teachers, TAs and admins); computed
    only when a template reads it. ``quota_requests_waiting``: how many quota requests wait
    for this person's answer (one query, on the first read). ``console_pages``: the
    console's navigation, for admins."""
    user = getattr(request, "user", None)

    def teaches() -> bool:
        if user is None or not user.is_authenticated:
            return False
        return bool(user.is_staff or teaching_courses(user).exists())

    @cache
    def quota_requests_waiting() -> int:
        # A callable, not a lazy object: templates call it once per resolve and ngettext
        # needs a real int; the cache keeps it to one query per page.
        if user is None or not user.is_authenticated:
            return 0
        return pending_to_answer(user).count()

    return {
        "teaches": SimpleLazyObject(teaches),
        "quota_requests_waiting": quota_requests_waiting,
        "console_pages": CONSOLE_PAGES if is_admin(user) else [],
        # What static/deskpool/console_live.js listens to (portal/routing.py).
        "console_live": {"updates_url": "/ws/updates/"},
    }
