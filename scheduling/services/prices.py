"""Correcting the price list: end a line, correct a line, close a report period
(``check_*`` / ``do_*``; admins only). Adding a line is ``accounting.check_price``.

A closed report period (:class:`~scheduling.models.usage.ClosedReport`) is final: the lines
that priced any use in it are recorded when it is closed, and then no change may alter what
any day of it costs. So a line a closed report used is never corrected, only ended, and no
earlier than the period's last day; no line is added, moved or ended into a closed period.
Each change takes the pool policy's row lock (as bookings do), checks again under it, and is
audited as ``usage.prices_changed`` with ``action`` (``ended``, ``corrected``, ``closed``)
and the line before and after (docs/accounting.md, docs/audit.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from decimal import Decimal
from typing import Any

from django.contrib.auth.models import AnonymousUser, User
from django.db import transaction
from django.db.models import Max, QuerySet
from django.utils import timezone
from django.utils.translation import gettext as _

from ..choices import AuditKind
from ..locks import lock_policy
from ..models import PriceRule
from ..models.usage import ClosedReport
from ..rules import pricing
from . import NotFound
from . import ServiceError as Invalid
from .accounting import (
    check_currency,
    check_report,
    line_fields,
    refuse_overlap,
    usage_report,
)
from .audit import record
from .eligibility import Forbidden

CORRECTED_FIELDS = ("price", "currency", "note", "valid_from", "valid_until")


def may_change_prices(user: User | AnonymousUser) -> bool:
    return bool(user.is_authenticated and user.is_staff)


def _admin_only(user: User | AnonymousUser) -> None:
    if not may_change_prices(user):
        raise Forbidden(_("Only admins change the price list."))


def _line(rule_id: int) -> PriceRule:
    rule = PriceRule.objects.select_related("profile").filter(pk=rule_id).first()
    if rule is None:
        raise NotFound(_("There is no such price line."))
    return rule


def _actor(user: User) -> str:
    return f"user:{user.get_username()}"


def price_list() -> QuerySet[PriceRule]:
    """Every line, newest first, with ``frozen_until``: the last day of the latest closed
    report that used it (None: no closed report did, so it may still be corrected)."""
    lines = PriceRule.objects.select_related("profile", "created_by")
    lines = lines.annotate(frozen_until=Max("closed_reports__period_end"))
    return lines.order_by("slice_kind", "profile__slug", "-valid_from", "-pk")


def closed_periods() -> list[ClosedReport]:
    return list(ClosedReport.objects.select_related("closed_by").prefetch_related("lines"))


# -- ending a line ---------------------------------------------------------------------------


@dataclass(frozen=True)
class EndRequest:
    rule: PriceRule
    valid_until: date


def _refuse_end(rule: PriceRule, last_day: date) -> None:
    if last_day < rule.valid_from:
        raise Invalid(
            _("A line cannot end before its first day, %(first)s.") % {"first": rule.valid_from},
            field="valid_until",
        )
    if rule.valid_until is not None and last_day >= rule.valid_until:
        raise Invalid(
            _("This line already ends on %(until)s; give an earlier last day, or correct it.")
            % {"until": rule.valid_until},
            field="valid_until",
        )
    for closed in ClosedReport.objects.order_by("period_start"):
        used = pricing.shared_days(
            rule.valid_from, rule.valid_until, closed.period_start, closed.period_end
        )
        if used is not None and last_day < closed.period_end:
            raise Invalid(
                _(
                    "The report period %(start)s to %(end)s is closed and this line applies "
                    "in it: its last day can be %(end)s or later."
                )
                % {"start": closed.period_start, "end": closed.period_end},
                field="valid_until",
            )


def check_end(user: User, rule_id: int, valid_until: date) -> EndRequest:
    """End a line: ``valid_until`` is its new last day (inclusive)."""
    _admin_only(user)
    rule = _line(rule_id)
    _refuse_end(rule, valid_until)
    return EndRequest(rule, valid_until)


def do_end(user: User, request: EndRequest) -> PriceRule:
    with transaction.atomic():
        lock_policy()
        rule = _line(request.rule.pk)
        _refuse_end(rule, request.valid_until)  # again, under the lock
        before = line_fields(rule)
        rule.valid_until = request.valid_until
        rule.save(update_fields=["valid_until"])
        _audit(user, "ended", rule, before)
    return rule


# -- correcting a line -----------------------------------------------------------------------


@dataclass(frozen=True)
class Correction:
    rule: PriceRule
    fields: dict[str, Any]


def _refuse_correction(rule: PriceRule, fields: dict[str, Any]) -> None:
    used_by = rule.closed_reports.order_by("period_start").first()
    if used_by is not None:
        raise Invalid(
            _(
                "The closed report period %(start)s to %(end)s used this line, so it stays as "
                "it is. End it instead, and add a new line after that period."
            )
            % {"start": used_by.period_start, "end": used_by.period_end}
        )
    if fields["price"] < 0:
        raise Invalid(_("A price cannot be negative."), field="price")
    check_currency(fields["currency"], but=rule)
    first, until = fields["valid_from"], fields["valid_until"]
    if until is not None and until < first:
        raise Invalid(_("The last valid day cannot be before the first one."), field="valid_until")
    if all(getattr(rule, name) == value for name, value in fields.items()):
        raise Invalid(_("The line says this already: change a field, or go back."))
    # A closed period's days keep the lines they had: a line that applied on no day of it
    # cannot start applying there, nor stop applying where it did.
    for closed in ClosedReport.objects.order_by("period_start"):
        period = (closed.period_start, closed.period_end)
        if pricing.shared_days(first, until, *period) != pricing.shared_days(
            rule.valid_from, rule.valid_until, *period
        ):
            raise Invalid(
                _(
                    "The report period %(start)s to %(end)s is closed: this line must apply on "
                    "the same days of it as before. Change the dates outside it only."
                )
                % {"start": closed.period_start, "end": closed.period_end},
                field="valid_from",
            )
    refuse_overlap(rule.slice_kind, rule.profile, first, until, but=rule)


def check_correct(user: User, rule_id: int, data: dict[str, Any]) -> Correction:
    """Correct a line's price, currency, note or dates (fields not in ``data`` keep theirs),
    only while no closed report used it."""
    _admin_only(user)
    rule = _line(rule_id)
    fields = {name: data.get(name, getattr(rule, name)) for name in CORRECTED_FIELDS}
    try:
        fields["price"] = Decimal(str(fields["price"]))
    except ArithmeticError:
        raise Invalid(_("Give the price as a number, such as 2.50."), field="price") from None
    fields["currency"] = str(fields["currency"] or "").strip()
    fields["note"] = str(fields["note"] or "").strip()[:300]
    _refuse_correction(rule, fields)
    return Correction(rule, fields)


def do_correct(user: User, correction: Correction) -> PriceRule:
    with transaction.atomic():
        lock_policy()
        rule = _line(correction.rule.pk)
        _refuse_correction(rule, correction.fields)  # again, under the lock
        before = line_fields(rule)
        for name, value in correction.fields.items():
            setattr(rule, name, value)
        rule.save(update_fields=list(CORRECTED_FIELDS))
        rule.refresh_from_db()
        _audit(user, "corrected", rule, before)
    return rule


def _audit(user: User, action: str, rule: PriceRule, before: dict[str, Any]) -> None:
    record(
        AuditKind.USAGE_PRICES_CHANGED,
        _actor(user),
        data={"action": action, "line": rule.pk, "before": before, "after": line_fields(rule)},
    )


# -- closing a report period ------------------------------------------------------------------


@dataclass(frozen=True)
class CloseRequest:
    period_start: date
    period_end: date
    note: str = ""


def _refuse_close(start: date, end: date) -> None:
    check_report("department", "month", start, end)  # dates in order, two years at most
    if end >= timezone.localdate():
        raise Invalid(
            _("A period is closed once it is over: its last day must be before today."),
            field="end",
        )
    clash = ClosedReport.objects.filter(period_start__lte=end, period_end__gte=start).first()
    if clash is not None:
        raise Invalid(
            _("The period %(start)s to %(end)s is closed already; close the days after it.")
            % {"start": clash.period_start, "end": clash.period_end},
            field="start",
        )


def check_close(user: User, start: date, end: date, note: str = "") -> CloseRequest:
    """Close the report period ``start`` to ``end`` (inclusive): its figures become final."""
    _admin_only(user)
    _refuse_close(start, end)
    return CloseRequest(start, end, note.strip()[:300])


def do_close(user: User, request: CloseRequest) -> ClosedReport:
    """Record the period and the lines that priced use in it (the usage report's)."""
    with transaction.atomic():
        lock_policy()
        _refuse_close(request.period_start, request.period_end)
        rows = usage_report("department", "month", request.period_start, request.period_end)
        used = sorted({rule_id for row in rows for rule_id in row.lines})
        closed = ClosedReport.objects.create(
            period_start=request.period_start,
            period_end=request.period_end,
            closed_by=user,
            note=request.note,
        )
        closed.lines.set(used)
        record(
            AuditKind.USAGE_PRICES_CHANGED,
            _actor(user),
            data={
                "action": "closed",
                "closed_report": closed.pk,
                "period_start": request.period_start.isoformat(),
                "period_end": request.period_end.isoformat(),
                "lines": used,
                "cost": str(sum((row.cost for row in rows), Decimal(0))),
            },
        )
    return closed
