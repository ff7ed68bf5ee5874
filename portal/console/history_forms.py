"""The console's metric history picker (``/console/history/``): which group (the pool, a GPU
model, a node, a rack) and which range. A plain GET form, usable without JavaScript; the
service (``metric_views.metric_history``) checks it and reads the history."""

from __future__ import annotations

from typing import Any, cast

from django import forms
from django.utils.translation import gettext_lazy as _

from portal.kit.forms import CheckedForm
from scheduling.services.metric_views import RANGES, SCOPES, group_names, metric_history

POOL = "pool"


def split_choice(value: str) -> tuple[str, str]:
    """``pool`` or ``<scope>:<name>`` (``node:gpu-a01``) as (scope, name)."""
    scope, _sep, name = value.partition(":")
    return scope, name


class HistoryForm(CheckedForm):
    """``of``: ``pool`` or a group as ``model:<model>``, ``node:<hostname>``, ``rack:<rack>``;
    ``range``: 1h, 1d, 7d or 30d. ``checked`` is the ``History`` to show."""

    field_names = {"scope": "of", "key": "of"}

    of = forms.ChoiceField(
        label=_("Show"),
        error_messages={
            "required": _("Choose the pool, a GPU model, a node or a rack."),
            "invalid_choice": _("There is no history for that; choose from the list."),
        },
    )
    range = forms.ChoiceField(
        label=_("Range"),
        choices=[(name, label) for name, (_span, _res, label) in RANGES.items()],
        widget=forms.RadioSelect,
        error_messages={
            "required": _("Choose a range of 1 hour, 1 day, 7 days or 30 days."),
            "invalid_choice": _("Choose a range of 1 hour, 1 day, 7 days or 30 days."),
        },
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        groups: list[tuple[Any, Any]] = [(POOL, SCOPES[POOL])]
        for scope, names in group_names().items():
            if names:
                groups.append((SCOPES[scope], [(f"{scope}:{n}", n) for n in names]))
        cast(forms.ChoiceField, self.fields["of"]).choices = groups

    @staticmethod
    def defaults() -> dict[str, str]:
        return {"of": POOL, "range": "1d"}

    def check(self, data: dict[str, Any]) -> Any:
        scope, name = split_choice(data["of"])
        return metric_history(scope, name, data["range"])
