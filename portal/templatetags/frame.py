"""The page frame's navigation (templates/base.html, templates/console/base.html):
``<a href="{% url 'home' %}"{% aria_current 'home' %}>`` marks the link of the page shown."""

from __future__ import annotations

from typing import Any

from django import template
from django.utils.safestring import SafeString, mark_safe

from portal.kit.navigation import is_current

register = template.Library()

CURRENT = mark_safe(' aria-current="page"')  # noqa: S308 - a constant, no outside input


@register.simple_tag(takes_context=True)
def aria_current(context: dict[str, Any], url_name: str) -> SafeString | str:
    """`` aria-current="page"`` on the link to the page being shown, else nothing."""
    return CURRENT if is_current(context.get("request"), url_name) else ""
