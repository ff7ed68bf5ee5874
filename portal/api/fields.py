"""API fields shared by the serializers."""

from __future__ import annotations

from typing import Any

from django.utils.translation import gettext as _
from rest_framework import serializers

from scheduling.excerpt import excerpt


class ChoiceField(serializers.ChoiceField):
    """DRF's choice, refused without repeating a long input: a short excerpt of it, and the
    choices to pick from (DRF's own message quotes the whole input back)."""

    def to_internal_value(self, data: Any) -> Any:
        try:
            return super().to_internal_value(data)
        except serializers.ValidationError:
            raise serializers.ValidationError(
                _("“%(input)s” is not one of: %(choices)s.")
                % {"input": excerpt(data), "choices": ", ".join(str(c) for c in self.choices)},
                code="invalid_choice",
            ) from None
