"""``{% confirm_question "stop" %}``: the question a destructive form asks (portal.kit.confirm),
for its ``data-confirm`` attribute."""

from __future__ import annotations

from typing import Any

from django import template

from portal.kit.confirm import question

register = template.Library()


@register.simple_tag
def confirm_question(action: str, **params: Any) -> str:
    return question(action, **params)
