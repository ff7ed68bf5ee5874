"""What every page's navigation needs to know about the person, and who is an admin."""

from __future__ import annotations

from functools import cache
from typing import Any

from django.http import HttpRequest
from django.utils.functional import SimpleLazyObject
from django.utils.translation import gettext_lazy

from scheduling.services.quota_requests import pending_to_answer
from scheduling.services.teaching import teaching_courses

# The console's pages in its navigation, in order: (URL name, label). Each page adds its line.
CONSOLE_PAGES: list[tuple[str, Any]] = [
    ("console", gettext_lazy("Overview")),
    ("console-pool", gettext_lazy("Pool")),
    ("console-queue", gettext_lazy("Queue")),
    ("console-quotas", gettext_lazy("Quotas")),
    ("console-profiles", gettext_lazy("Desktop profiles")),
    ("console-alerts", gettext_lazy("Alerts")),
    ("console-idle", gettext_lazy("Idle desktops")),
    ("console-reports", gettext_lazy("Reports")),
    ("console-history", gettext_lazy("Metric history")),
    ("console-prices", gettext_lazy("Prices")),
    ("console-course-folders", gettext_lazy("Course folders")),
    ("console-audit", gettext_lazy("Audit")),
]


def is_admin(user: Any) -> bool:
    return bool(user is not None and user.is_authenticated and user.is_staff)


def is_current(request: HttpRequest | None, url_name: str) -> bool:
    """Whether ``request`` shows the page named ``url_name`` (``"namespace:name"`` for a
    namespaced one): the one test behind every navigation's ``aria-current="page"``."""
    match = getattr(request, "resolver_match", None)
    return match is not None and match.view_name == url_name


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
    }
