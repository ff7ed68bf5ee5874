"""Forms of the console's idle pages (issue 15, docs/lifecycle.md): an idle policy row, with
the waits in minutes (the end in hours) as plain numbers, checked by
``services.idle_policies.check_idle_policy``; and the period of the idle hours."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django import forms
from django.utils.translation import gettext_lazy as _

from portal.kit.form_fields import AsciiFloatField, AsciiIntegerField
from portal.kit.forms import CheckedForm
from scheduling.choices import Purpose
from scheduling.models import DesktopProfile, IdlePolicy
from scheduling.services.idle_hours import DEFAULT_DAYS, MAX_DAYS, MIN_DAYS, check_days
from scheduling.services.idle_policies import (
    DEFAULTS,
    LONGEST,
    IdlePolicyChange,
    check_idle_policy,
)

# Each wait's unit in the form: (field, seconds per unit).
UNITS = {"idle_after": 60, "warn_after": 60, "suspend_after": 60, "end_after": 3600}


def _number(value: float) -> float | int:
    """7.0 shown as 7, 0.5 as 0.5."""
    return int(value) if float(value).is_integer() else value


def _wait(name: str, label: Any, help_text: Any) -> AsciiFloatField:
    if UNITS[name] == 3600:
        invalid = _("Enter a number of hours, such as 24.")
        too_long = _("Enter at most %(limit_value)s hours.")
    else:
        invalid = _("Enter a number of minutes, such as 30.")
        too_long = _("Enter at most %(limit_value)s minutes.")
    return AsciiFloatField(
        label=label,
        help_text=help_text,
        max_value=int(LONGEST[name].total_seconds()) // UNITS[name],
        error_messages={"required": invalid, "invalid": invalid, "max_value": too_long},
    )


def _pct(label: Any, help_text: Any, *, required: bool = True) -> AsciiFloatField:
    return AsciiFloatField(
        label=label,
        help_text=help_text,
        required=required,
        error_messages={
            "required": _("Enter a percentage from 0 to 100."),
            "invalid": _("Enter a percentage from 0 to 100."),
        },
    )


class IdlePolicyForm(CheckedForm):
    """One idle policy row: which sessions it covers, and when they are warned, suspended
    and ended."""

    profile = forms.ModelChoiceField(
        label=_("Desktop profile"),
        queryset=DesktopProfile.objects.order_by("name"),
        required=False,
        empty_label=_("Every profile"),
        error_messages={"invalid_choice": _("That profile no longer exists; choose another.")},
    )
    purpose = forms.ChoiceField(
        label=_("Purpose"),
        choices=[("", _("Every purpose")), *Purpose.choices],
        required=False,
        error_messages={"invalid_choice": _("Choose a purpose, or every purpose.")},
    )
    enabled = forms.BooleanField(
        label=_("On: quiet desktops are warned and suspended"), required=False, initial=True
    )
    idle_after = _wait(
        "idle_after", _("Shown as idle after (minutes)"), _("Quiet this long: shown as idle.")
    )
    warn_after = _wait(
        "warn_after",
        _("Warned after (minutes)"),
        _("Quiet this long: the person is warned. At least the idle time."),
    )
    suspend_after = _wait(
        "suspend_after",
        _("Suspended after the warning (minutes)"),
        _("This long after the warning with no activity: suspended."),
    )
    end_after = _wait(
        "end_after", _("Ended after suspended (hours)"), _("Suspended this long: ended.")
    )
    gpu_idle_pct = _pct(
        _("GPU quiet below (%)"), _("GPU use below this (percent of its slice) counts as quiet.")
    )
    cpu_idle_pct = _pct(
        _("CPU quiet below (%)"),
        _("CPU use below this (percent of its limit) counts as quiet; empty: the CPU is ignored."),
        required=False,
    )
    gpu_needs_viewer = forms.BooleanField(
        label=_("A busy GPU keeps the desktop only while someone is connected"),
        help_text=_("Thesis sessions with a busy GPU are kept regardless."),
        required=False,
    )

    change: IdlePolicyChange | None = None

    def __init__(self, *args: Any, policy: IdlePolicy | None = None, **kwargs: Any) -> None:
        if "initial" not in kwargs:
            source: Any = policy if policy is not None else DEFAULTS
            initial: dict[str, Any] = {
                name: _number(getattr(source, name).total_seconds() / unit)
                for name, unit in UNITS.items()
            }
            for name in ("enabled", "gpu_idle_pct", "cpu_idle_pct", "gpu_needs_viewer"):
                value = getattr(source, name)
                initial[name] = _number(value) if isinstance(value, float) else value
            if policy is not None:
                initial["profile"] = policy.profile_id
                initial["purpose"] = policy.purpose
            kwargs["initial"] = initial
        super().__init__(*args, **kwargs)
        self.policy = policy

    def check(self, data: dict[str, Any]) -> None:
        values = dict(data)
        for name, unit in UNITS.items():
            values[name] = timedelta(seconds=data[name] * unit)
        self.change = check_idle_policy(values, policy=self.policy)


class IdleHoursForm(CheckedForm):
    """The period of the idle hours: the last ``days`` days."""

    days = AsciiIntegerField(
        label=_("Last days"),
        required=False,
        initial=DEFAULT_DAYS,
        min_value=MIN_DAYS,
        max_value=MAX_DAYS,
        error_messages={
            "invalid": _("Enter a whole number of days, such as 7."),
            "min_value": _("Enter a number of days from 1 to 90."),
            "max_value": _("Enter a number of days from 1 to 90."),
        },
    )

    def check(self, data: dict[str, Any]) -> None:
        data["days"] = check_days(data.get("days"))
