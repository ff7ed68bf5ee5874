"""Number fields for every form of the portal (pages, console, admin): ASCII digits only,
and integers within the database's integer range.

Django's own fields read any Unicode digit (``int("١٢")`` is 12, ``int("１２")`` too) and
no range unless told: a number written in another script, or one too large for its column,
reached the database (a 500). These refuse both as a field error. The pages' forms declare
them; the Django admin's model forms get them through :class:`NumbersAdmin`.
"""

from __future__ import annotations

import re
from typing import Any

from django import forms
from django.contrib import admin
from django.core.exceptions import ValidationError
from django.db import models
from django.utils.translation import gettext_lazy as _

# PostgreSQL's integer column (and Django's IntegerField on every backend it supports).
INT_MIN, INT_MAX = -(2**31), 2**31 - 1
BIGINT_MAX = 2**63 - 1

_INTEGER = re.compile(r"\s*[+-]?[0-9]+\s*", re.ASCII)
_DECIMAL = re.compile(r"\s*[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?\s*", re.ASCII)


def _ascii_only(field: forms.Field, value: Any, pattern: re.Pattern[str]) -> None:
    if value in field.empty_values or isinstance(value, int | float):
        return
    if not pattern.fullmatch(str(value)):
        raise ValidationError(field.error_messages["invalid"], code="invalid")


class AsciiIntegerField(forms.IntegerField):
    """An integer in the digits 0-9, between INT_MIN and INT_MAX unless narrower bounds
    are given."""

    default_error_messages = {"invalid": _("Enter a whole number using the digits 0-9.")}

    def __init__(
        self, *, max_value: int | None = None, min_value: int | None = None, **kwargs: Any
    ) -> None:
        super().__init__(
            max_value=INT_MAX if max_value is None else max_value,
            min_value=INT_MIN if min_value is None else min_value,
            **kwargs,
        )

    def to_python(self, value: Any) -> int | None:
        _ascii_only(self, value, _INTEGER)
        return super().to_python(value)


class AsciiFloatField(forms.FloatField):
    """A number in the digits 0-9 (with a decimal point or an exponent)."""

    default_error_messages = {"invalid": _("Enter a number using the digits 0-9.")}

    def to_python(self, value: Any) -> float | None:  # type: ignore[override]
        _ascii_only(self, value, _DECIMAL)
        return super().to_python(value)


class NumbersAdmin(admin.ModelAdmin):
    """The admin's base: its model forms' integer and float fields are the ones above."""

    formfield_overrides = {
        models.BigIntegerField: {"form_class": AsciiIntegerField, "max_value": BIGINT_MAX},
        models.IntegerField: {"form_class": AsciiIntegerField},  # and its Positive... kinds
        models.FloatField: {"form_class": AsciiFloatField},
    }
