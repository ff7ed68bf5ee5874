"""Forms of the console's alerts, reports and audit pages; each asks its ``check_*`` service
(or, for the read-only searches, checks its own fields)."""

from __future__ import annotations

from datetime import date, timedelta
from decimal import Decimal
from typing import Any

from django import forms
from django.contrib.auth.models import User
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from portal.console.audit_search import AuditSearch
from portal.kit.form_fields import AsciiFloatField, AsciiIntegerField
from portal.kit.forms import CheckedForm
from scheduling.choices import SliceKind
from scheduling.labels import audit_kind_choices
from scheduling.models import AlertRule, DesktopProfile, PriceRule, PriceUnit
from scheduling.models.alerts import Metric, Scope
from scheduling.services import ServiceError
from scheduling.services.accounting import PriceRequest, ReportRequest, check_price, check_report
from scheduling.services.alert_changes import MAX_SUSTAINED_MINUTES, RuleChange, check_rule
from scheduling.services.prices import (
    CloseRequest,
    Correction,
    EndRequest,
    check_close,
    check_correct,
    check_end,
)

NUMBER_ERRORS = {"invalid": _("Enter a number, such as 80, or leave it blank for none.")}
DATE_ERRORS = {"invalid": _("Enter a date, such as 2026-06-30.")}
PRICE_ERRORS = {
    "invalid": _("Enter a price, such as 2.50."),
    "required": _("Enter a price, such as 2.50."),
    "max_decimal_places": _("Enter a price with at most 4 digits after the point."),
    "max_whole_digits": _("Enter a price of at most 8 digits before the point."),
}
REQUIRED_DATE_ERRORS = {**DATE_ERRORS, "required": _("Enter a date, such as 2026-06-30.")}


def _date_input() -> forms.DateInput:
    return forms.DateInput(attrs={"type": "date"}, format="%Y-%m-%d")


class AlertRuleForm(CheckedForm):
    """A new alert rule, or changes to one; ``clean`` hands the fields to ``check_rule``."""

    name = forms.CharField(label=_("Name"), max_length=100, required=False)
    metric = forms.ChoiceField(label=_("Metric"), choices=Metric.choices)
    scope = forms.ChoiceField(label=_("Scope"), choices=Scope.choices)
    warning = AsciiFloatField(
        label=_("Warning level"), required=False, error_messages=NUMBER_ERRORS
    )
    critical = AsciiFloatField(
        label=_("Critical level"), required=False, error_messages=NUMBER_ERRORS
    )
    recovery = AsciiFloatField(
        label=_("Recovers below"),
        required=False,
        error_messages=NUMBER_ERRORS,
        help_text=_("Blank: a person resolves the alert."),
    )
    sustained_minutes = AsciiIntegerField(
        label=_("Sustained for (minutes)"),
        min_value=0,
        max_value=MAX_SUSTAINED_MINUTES,
        initial=0,
        error_messages={
            "invalid": _("Enter a whole number of minutes, such as 30."),
            "required": _("Enter a whole number of minutes; 0 raises at once."),
            "min_value": _("Enter 0 minutes or more."),
            "max_value": _("Enter at most a week of minutes (%(limit_value)s)."),
        },
    )
    enabled = forms.BooleanField(label=_("Enabled"), required=False, initial=True)
    extra_recipients = forms.CharField(
        label=_("Also e-mail"),
        required=False,
        help_text=_("E-mail addresses besides the admins', separated by commas."),
    )

    def __init__(self, user: User, *args: Any, rule: AlertRule | None = None, **kwargs: Any):
        if rule is not None and "initial" not in kwargs:
            kwargs["initial"] = {
                "name": rule.name,
                "metric": rule.metric,
                "scope": rule.scope,
                "warning": rule.warning,
                "critical": rule.critical,
                "recovery": rule.recovery,
                "sustained_minutes": rule.sustained_minutes,
                "enabled": rule.enabled,
                "extra_recipients": ", ".join(rule.extra_recipients or []),
            }
        super().__init__(*args, **kwargs)
        self.user, self.rule = user, rule

    checked: RuleChange | None

    def check(self, data: dict[str, Any]) -> RuleChange:
        return check_rule(self.user, data, self.rule)


class ReportForm(CheckedForm):
    """Which usage report: grouped by department, course or user, per week or month."""

    group = forms.ChoiceField(
        label=_("Per"),
        choices=[("department", _("Department")), ("course", _("Course")), ("user", _("User"))],
    )
    period = forms.ChoiceField(label=_("By"), choices=[("week", _("Week")), ("month", _("Month"))])
    start = forms.DateField(label=_("From"), widget=_date_input(), error_messages=DATE_ERRORS)
    end = forms.DateField(label=_("To"), widget=_date_input(), error_messages=DATE_ERRORS)

    @staticmethod
    def defaults() -> dict[str, str]:
        today = timezone.localdate()
        return {
            "group": "department",
            "period": "week",
            "start": (today - timedelta(weeks=8)).isoformat(),
            "end": today.isoformat(),
        }

    checked: ReportRequest | None

    def check(self, data: dict[str, Any]) -> ReportRequest:
        return check_report(data["group"], data["period"], data["start"], data["end"])


class AuditSearchForm(forms.Form):
    """Search the audit trail: who, what, when (days in your time zone), session, node, text."""

    actor = forms.CharField(
        label=_("Who"), required=False, max_length=200, help_text=_("Part of the actor, e.g. ada.")
    )
    kind = forms.ChoiceField(
        label=_("What"),
        required=False,
        choices=lambda: [("", _("Any kind")), *audit_kind_choices()],
    )
    since = forms.DateField(
        label=_("From"), required=False, widget=_date_input(), error_messages=DATE_ERRORS
    )
    until = forms.DateField(
        label=_("To"), required=False, widget=_date_input(), error_messages=DATE_ERRORS
    )
    session = AsciiIntegerField(
        label=_("Session id"),
        required=False,
        min_value=1,
        error_messages={"invalid": _("Enter a session's number, such as 42.")},
    )
    node = AsciiIntegerField(
        label=_("Node id"),
        required=False,
        min_value=1,
        error_messages={"invalid": _("Enter a node's number, such as 3.")},
    )
    text = forms.CharField(
        label=_("Text"),
        required=False,
        max_length=200,
        help_text=_("Found anywhere in the event's details."),
    )

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        since: date | None = data.get("since")
        until: date | None = data.get("until")
        if since and until and until < since:
            self.add_error("until", _("The last day cannot be before the first day."))
        return data

    def search(self) -> AuditSearch:
        """The search of a valid form."""
        data = self.cleaned_data
        return AuditSearch(
            actor=data.get("actor") or "",
            kind=data.get("kind") or "",
            since=data.get("since"),
            until=data.get("until"),
            session_id=data.get("session"),
            node_id=data.get("node"),
            text=data.get("text") or "",
        )


# -- the price list (console/prices.html) ------------------------------------------------------


def _price_field() -> AsciiFloatField:
    return AsciiFloatField(label=_("Price"), error_messages=PRICE_ERRORS)


def _price(value: float) -> Decimal:
    """The price typed, as the decimal it was written: 8 digits and 4 places at most (the
    column's), else a refusal on the field."""
    price = Decimal(str(value))
    if price.as_tuple().exponent < -4:  # type: ignore[operator]
        raise ServiceError(str(PRICE_ERRORS["max_decimal_places"]), field="price")
    if abs(price) >= 10**8:
        raise ServiceError(str(PRICE_ERRORS["max_whole_digits"]), field="price")
    return price


def _currency_field() -> forms.CharField:
    return forms.CharField(
        label=_("Currency"), max_length=3, help_text=_("A three-letter ISO code, such as CHF.")
    )


class _PriceLineFields(CheckedForm):
    """What a line says that both adding and correcting it ask: price, currency, dates, note."""

    price = _price_field()
    currency = _currency_field()
    valid_from = forms.DateField(
        label=_("First day"), widget=_date_input(), error_messages=REQUIRED_DATE_ERRORS
    )
    valid_until = forms.DateField(
        label=_("Last day"),
        required=False,
        widget=_date_input(),
        error_messages=DATE_ERRORS,
        help_text=_("Blank: open-ended."),
    )
    note = forms.CharField(label=_("Note"), max_length=300, required=False)


class PriceAddForm(_PriceLineFields):
    """A new line of the price list: ``accounting.check_price``."""

    slice_kind = forms.ChoiceField(label=_("Slice kind"), required=False)
    profile = forms.ChoiceField(label=_("Desktop profile"), required=False)
    unit = forms.ChoiceField(label=_("Unit"), choices=PriceUnit.choices)
    field_order = ["slice_kind", "profile", "unit", "price", "currency", "valid_from"]

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        kinds = [("", _("Any kind")), *SliceKind.choices]
        profiles = DesktopProfile.objects.order_by("slug").values_list("slug", "name")
        self.fields["slice_kind"].choices = kinds  # type: ignore[attr-defined]
        self.fields["profile"].choices = [("", _("Any profile")), *profiles]  # type: ignore[attr-defined]
        if not self.is_bound:
            listed = PriceRule.objects.values_list("currency", flat=True).first()
            self.initial.setdefault("currency", listed or "")

    checked: PriceRequest | None

    def check(self, data: dict[str, Any]) -> PriceRequest:
        return check_price(
            slice_kind=data.get("slice_kind") or "",
            profile=data.get("profile") or "",
            unit=data["unit"],
            price=_price(data["price"]),
            currency=(data.get("currency") or "").strip(),
            valid_from=data["valid_from"],
            valid_until=data.get("valid_until"),
            note=(data.get("note") or "").strip(),
        )


class PriceEndForm(CheckedForm):
    """End a line: its new last day (``prices.check_end``)."""

    valid_until = forms.DateField(
        label=_("Last day"), widget=_date_input(), error_messages=REQUIRED_DATE_ERRORS
    )

    def __init__(self, user: User, rule: PriceRule, *args: Any, **kwargs: Any):
        kwargs.setdefault("prefix", f"end-{rule.pk}")
        super().__init__(*args, **kwargs)
        self.user, self.rule = user, rule

    checked: EndRequest | None

    def check(self, data: dict[str, Any]) -> EndRequest:
        return check_end(self.user, self.rule.pk, data["valid_until"])


class PriceCorrectForm(_PriceLineFields):
    """Correct a line's price, currency, note and dates (``prices.check_correct``)."""

    def __init__(self, user: User, rule: PriceRule, *args: Any, **kwargs: Any):
        kwargs.setdefault(
            "initial",
            {
                "price": rule.price,
                "currency": rule.currency,
                "valid_from": rule.valid_from,
                "valid_until": rule.valid_until,
                "note": rule.note,
            },
        )
        super().__init__(*args, **kwargs)
        self.user, self.rule = user, rule

    checked: Correction | None

    def check(self, data: dict[str, Any]) -> Correction:
        fields = {
            "price": _price(data["price"]),
            "currency": (data.get("currency") or "").strip(),
            "note": data.get("note") or "",
            "valid_from": data["valid_from"],
            "valid_until": data.get("valid_until"),
        }
        return check_correct(self.user, self.rule.pk, fields)


class CloseReportForm(CheckedForm):
    """Close a report period: its figures become final (``prices.check_close``)."""

    start = forms.DateField(
        label=_("First day"), widget=_date_input(), error_messages=REQUIRED_DATE_ERRORS
    )
    end = forms.DateField(
        label=_("Last day"), widget=_date_input(), error_messages=REQUIRED_DATE_ERRORS
    )
    note = forms.CharField(label=_("Note"), max_length=300, required=False)

    def __init__(self, user: User, *args: Any, **kwargs: Any):
        kwargs.setdefault("prefix", "close")
        super().__init__(*args, **kwargs)
        self.user = user

    checked: CloseRequest | None

    def check(self, data: dict[str, Any]) -> CloseRequest:
        return check_close(self.user, data["start"], data["end"], data.get("note") or "")
