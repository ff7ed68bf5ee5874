"""What every page's navigation needs to know about the person."""

from __future__ import annotations

from django.http import HttpRequest
from django.utils.functional import SimpleLazyObject

from .teaching import teaching_courses


def navigation(request: HttpRequest) -> dict[str, object]:
    """``teaches``: whether to show the Courses link (teachers, TAs and admins); computed
    only when a template reads it."""
    user = getattr(request, "user", None)

    def teaches() -> bool:
        if user is None or not user.is_authenticated:
            return False
        return bool(user.is_staff or teaching_courses(user).exists())

    return {"teaches": SimpleLazyObject(teaches)}
