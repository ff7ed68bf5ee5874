"""Accounting and chargeback: a usage record per run, the price list, and the usage reports.

Usage records are opened and closed by ``usage_runs`` (one per run, written inside the
transition's transaction). Bookings are billed on what they held,
elastic use (sessions outside a booking) on what it used. Prices come from
``scheduling.rules.pricing``.
"""

from __future__ import annotations

import io
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone
from django.utils.translation import gettext as _

from ..choices import AuditKind, SliceKind
from ..csv_export import SafeWriter
from ..excerpt import excerpt
from ..locks import lock_policy
from ..models import (
    Booking,
    DesktopProfile,
    PriceRule,
    PriceUnit,
    Slice,
    UsageRecord,
)
from ..models.usage import ClosedReport
from ..rules import pricing
from . import ServiceError
from .audit import record
from .usage_runs import measures

GROUPS = ("department", "course", "user")
PERIODS = ("week", "month")
LONGEST_REPORT = timedelta(days=2 * 366)


def records_matching(filters: Mapping[str, Any]) -> QuerySet[UsageRecord]:
    """Records filtered by user, course, department, purpose, booked, open, since, until."""
    records = UsageRecord.objects.all()
    for name, lookup in (
        ("user", "username"),
        ("course", "course_code"),
        ("department", "department"),
        ("purpose", "purpose"),
        ("session", "session_id"),
    ):
        if filters.get(name) not in (None, ""):
            records = records.filter(**{lookup: filters[name]})
    if filters.get("open") is not None:
        records = records.filter(ended_at__isnull=bool(filters["open"]))
    if filters.get("booked") is not None:
        records = records.filter(booking_id__isnull=not filters["booked"])
    if filters.get("since"):
        records = records.filter(started_at__gte=_day_start(filters["since"]))
    if filters.get("until"):
        records = records.filter(started_at__lt=_day_start(filters["until"] + timedelta(days=1)))
    return records.order_by("started_at", "pk")


# -- the price list ---------------------------------------------------------------------------


@dataclass(frozen=True)
class PriceRequest:
    """A checked new line of the price list."""

    slice_kind: str
    profile: DesktopProfile | None
    unit: str
    price: Decimal
    currency: str
    valid_from: date
    valid_until: date | None
    note: str = ""


def price_lines() -> list[pricing.PriceLine]:
    return [
        pricing.PriceLine(
            slice_kind=r.slice_kind,
            profile=r.profile.slug if r.profile else "",
            unit=r.unit,
            price=r.price,
            currency=r.currency,
            valid_from=r.valid_from,
            valid_until=r.valid_until,
            rule_id=r.pk,
        )
        for r in PriceRule.objects.select_related("profile")
    ]


def refuse_closed_days(first: date, until: date | None, field: str) -> None:
    """Refuse dates that reach into a closed report period (``ClosedReport``): a line added
    or moved there would change that period's final figures."""
    for closed in ClosedReport.objects.order_by("period_start"):
        if pricing.shared_days(first, until, closed.period_start, closed.period_end):
            raise ServiceError(
                _(
                    "The report period %(start)s to %(end)s is closed: its prices stay as they "
                    "were. Give dates after %(end)s."
                )
                % {"start": closed.period_start, "end": closed.period_end},
                field=field,
            )


def check_price(
    *,
    slice_kind: str,
    profile: str,
    unit: str,
    price: Decimal,
    currency: str,
    valid_from: date,
    valid_until: date | None,
    note: str = "",
) -> PriceRequest:
    """Validate a new price line: known kind, profile and unit, a price of 0 or more, the
    list's one currency, dates in order, and no overlap with a line of the same key."""
    if slice_kind and slice_kind not in SliceKind.values:
        raise ServiceError(
            _("Choose a slice kind among %(kinds)s, or leave it empty for any kind.")
            % {"kinds": ", ".join(SliceKind.values)},
            field="slice_kind",
        )
    found = DesktopProfile.objects.filter(slug=profile).first() if profile else None
    if profile and found is None:
        raise ServiceError(
            _("There is no desktop profile %(slug)s; give a profile's slug, or none for any.")
            % {"slug": excerpt(profile)},
            field="profile",
        )
    if unit not in PriceUnit.values:
        raise ServiceError(_("Choose the unit gpu_hour or cu_hour."), field="unit")
    if price < 0:
        raise ServiceError(_("A price cannot be negative."), field="price")
    check_currency(currency)
    if valid_until is not None and valid_until < valid_from:
        raise ServiceError(
            _("The last valid day cannot be before the first one."), field="valid_until"
        )
    refuse_closed_days(valid_from, valid_until, "valid_from")
    refuse_overlap(slice_kind, found, valid_from, valid_until)
    return PriceRequest(slice_kind, found, unit, price, currency, valid_from, valid_until, note)


def check_currency(currency: str, but: PriceRule | None = None) -> None:
    """A three-letter ISO code, the list's one currency (``but``: a line being corrected,
    which may change it when it is the only line)."""
    if len(currency) != 3 or not currency.isalpha() or not currency.isupper():
        raise ServiceError(
            _("Give the currency as a three-letter ISO code, such as CHF."), field="currency"
        )
    listed = PriceRule.objects.exclude(currency=currency)
    if but is not None:
        listed = listed.exclude(pk=but.pk)
    if other := listed.values_list("currency", flat=True).first():
        raise ServiceError(
            _("The price list is in %(currency)s; give this price in %(currency)s too.")
            % {"currency": other},
            field="currency",
        )


def refuse_overlap(
    slice_kind: str,
    profile: DesktopProfile | None,
    valid_from: date,
    valid_until: date | None,
    but: PriceRule | None = None,
) -> None:
    """Refuse dates that overlap another line of the same key (kind, profile)."""
    same_key = PriceRule.objects.filter(slice_kind=slice_kind, profile=profile)
    if but is not None:
        same_key = same_key.exclude(pk=but.pk)
    for rule in same_key:
        if pricing.overlaps(valid_from, valid_until, rule.valid_from, rule.valid_until):
            raise ServiceError(
                _(
                    "A price for this kind and profile is already valid from %(first)s to "
                    "%(until)s; start the new one after it, or give it an end before it."
                )
                % {"first": rule.valid_from, "until": rule.valid_until or _("open end")},
                field="valid_from",
            )


def do_price(user: User, request: PriceRequest) -> PriceRule:
    """Add the line to the price list and audit it (checked again under the lock the price
    list's changes and a period's closing take: ``services.prices``)."""
    with transaction.atomic():
        lock_policy()
        refuse_closed_days(request.valid_from, request.valid_until, "valid_from")
        refuse_overlap(request.slice_kind, request.profile, request.valid_from, request.valid_until)
        rule = PriceRule.objects.create(
            slice_kind=request.slice_kind,
            profile=request.profile,
            unit=request.unit,
            price=request.price,
            currency=request.currency,
            valid_from=request.valid_from,
            valid_until=request.valid_until,
            note=request.note,
            created_by=user,
        )
        record(
            AuditKind.USAGE_PRICES_CHANGED,
            f"user:{user.get_username()}",
            data={"action": "added", "line": rule.pk, "after": line_fields(rule)},
        )
    return rule


def line_fields(rule: PriceRule) -> dict[str, Any]:
    """A line as the audit keeps it (before and after a change)."""
    return {
        "id": rule.pk,
        "slice_kind": rule.slice_kind,
        "profile": rule.profile.slug if rule.profile else "",
        "unit": rule.unit,
        "price": str(rule.price),
        "currency": rule.currency,
        "valid_from": rule.valid_from.isoformat(),
        "valid_until": rule.valid_until.isoformat() if rule.valid_until else None,
        "note": rule.note,
    }


# -- billing ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class BookingCharge:
    """What a booking held: seats x its window (up to ``until``) x the profile's slice."""

    booking_id: int
    course_code: str
    department: str
    starts_at: datetime
    slice_kind: str
    profile_slug: str
    gpu_hours: Decimal
    cu_hours: Decimal
    cost: Decimal
    line: pricing.PriceLine | None = None  # the line that priced it (None: none did)


def seat_shape(profile: DesktopProfile) -> tuple[str, float, float]:
    """(kind, GPUs, CUs) of one seat: the smallest present slice that fits the profile, as
    the scheduler reserves it; a whole GPU of 1 CU when none fits, nothing for CPU only."""
    if not profile.gpu_count:
        return "", 0.0, 0.0
    fitting = [
        s
        for s in Slice.objects.filter(present=True, gpu__present=True).select_related("gpu")
        if s.kind in profile.allowed_kinds and s.memory_mb >= profile.gpu_memory_min_mb
    ]
    if not fitting:
        return SliceKind.WHOLE, float(profile.gpu_count), float(profile.gpu_count)
    best = min(fitting, key=lambda s: (s.milli, s.pk))
    part = best.milli / 1000 * profile.gpu_count
    return best.kind, part, best.gpu.compute_units * part


def booking_charge(
    booking: Booking, lines: list[pricing.PriceLine], until: datetime
) -> BookingCharge:
    kind, gpus, cus = seat_shape(booking.profile)
    hours = pricing.hours_between(booking.starts_at, min(booking.ends_at, until))
    gpu_hours = pricing.held_hours(gpus * booking.seats, hours)
    cu_hours = pricing.held_hours(cus * booking.seats, hours)
    line = pricing.line_for(
        lines, kind, booking.profile.slug, timezone.localdate(booking.starts_at)
    )
    return BookingCharge(
        booking_id=booking.pk,
        course_code=booking.course.code,
        department=booking.course.department,
        starts_at=booking.starts_at,
        slice_kind=kind,
        profile_slug=booking.profile.slug,
        gpu_hours=gpu_hours,
        cu_hours=cu_hours,
        cost=pricing.cost(line, gpu_hours, cu_hours),
        line=line,
    )


def record_line(record: UsageRecord, lines: list[pricing.PriceLine]) -> pricing.PriceLine | None:
    """The line that prices a run: none inside a booking (the booking is billed)."""
    if record.booking_id is not None:
        return None
    day = timezone.localdate(record.started_at)
    return pricing.line_for(lines, record.slice_kind, record.profile_slug, day)


def record_cost(record: UsageRecord, lines: list[pricing.PriceLine], until: datetime) -> Decimal:
    """Elastic use is billed on what it used; a run inside a booking costs nothing more."""
    line = record_line(record, lines)
    if line is None:
        return Decimal(0)
    gpu_hours, cu_hours, _idle = measures(record, until)
    return pricing.cost(line, gpu_hours, cu_hours)


# -- reports ----------------------------------------------------------------------------------


@dataclass
class LineUse:
    """What one price line priced in a report row."""

    rule_id: int
    price: Decimal
    unit: str
    currency: str
    cost: Decimal = Decimal(0)

    def __str__(self) -> str:
        return f"#{self.rule_id} {self.price} {self.currency}/{self.unit}: {self.cost}"


@dataclass
class Row:
    """One group's use in one period (a run counts in the period its run started), and the
    price lines that priced it (``lines``: rule id -> what it priced)."""

    group: str
    key: str
    period: str
    period_start: date
    runs: int = 0
    gpu_hours: Decimal = Decimal(0)
    cu_hours: Decimal = Decimal(0)
    idle_gpu_hours: Decimal = Decimal(0)
    booked_gpu_hours: Decimal = Decimal(0)
    cost: Decimal = Decimal(0)
    currency: str = ""
    lines: dict[int, LineUse] = field(default_factory=dict)

    def priced(self, line: pricing.PriceLine | None, cost: Decimal) -> None:
        """Add a use's cost, and note the line that priced it."""
        self.cost += cost
        if line is None or line.rule_id is None:
            return
        use = self.lines.get(line.rule_id)
        if use is None:
            use = LineUse(line.rule_id, line.price, line.unit, line.currency)
            self.lines[line.rule_id] = use
        use.cost += cost


@dataclass(frozen=True)
class ReportRequest:
    group: str
    period: str
    start: date
    end: date


def check_report(group: str, period: str, start: date, end: date) -> ReportRequest:
    if group not in GROUPS:
        raise ServiceError(_("Group by department, course or user."), field="group")
    if period not in PERIODS:
        raise ServiceError(_("Choose the period week or month."), field="period")
    if end < start:
        raise ServiceError(_("The end date cannot be before the start date."), field="end")
    if end - start > LONGEST_REPORT:
        raise ServiceError(_("A report covers two years at most; shorten it."), field="end")
    return ReportRequest(group, period, start, end)


def _day_start(day: date) -> datetime:
    return timezone.make_aware(datetime.combine(day, time.min))


def period_start(moment: datetime, period: str) -> date:
    """Monday of the week, or the first of the month, in the current time zone."""
    day = timezone.localdate(moment)
    if period == "week":
        return day - timedelta(days=day.weekday())
    return day.replace(day=1)


def _key(group: str, department: str, course: str, username: str) -> str:
    return {"department": department, "course": course, "user": username}[group]


def usage_report(
    group_by: str, period: str, start: date, end: date, now: datetime | None = None
) -> list[Row]:
    """Use and cost per group and period, for runs and bookings that started from ``start``
    to ``end`` (inclusive). Bookings are billed to their course (and its department); in
    the per-user report they are the row with an empty user."""
    request = check_report(group_by, period, start, end)
    now = now or timezone.now()
    lines = price_lines()
    currency = lines[0].currency if lines else ""
    rows: dict[tuple[str, date], Row] = {}

    def row(key: str, moment: datetime) -> Row:
        begins = period_start(moment, request.period)
        found = rows.get((key, begins))
        if found is None:
            found = rows[(key, begins)] = Row(group_by, key, period, begins, currency=currency)
        return found

    since, before = _day_start(start), _day_start(end + timedelta(days=1))
    records = UsageRecord.objects.filter(started_at__gte=since, started_at__lt=before)
    for run in records.order_by("started_at", "pk"):
        key = _key(group_by, run.department, run.course_code, run.username)
        target = row(key, run.started_at)
        gpu_hours, cu_hours, idle = measures(run, now)
        target.runs += 1
        target.gpu_hours += gpu_hours
        target.cu_hours += cu_hours
        target.idle_gpu_hours += idle
        line = record_line(run, lines)
        target.priced(line, pricing.cost(line, gpu_hours, cu_hours))
    bookings = Booking.objects.filter(
        cancelled_at=None, starts_at__gte=since, starts_at__lt=min(before, now)
    ).select_related("course", "profile")
    for booking in bookings.order_by("starts_at", "pk"):
        charge = booking_charge(booking, lines, now)
        target = row(_key(group_by, charge.department, charge.course_code, ""), booking.starts_at)
        target.booked_gpu_hours += charge.gpu_hours
        target.priced(charge.line, charge.cost)
    return sorted(rows.values(), key=lambda r: (r.period_start, r.key))


CSV_COLUMNS = (
    "group",
    "key",
    "period",
    "period_start",
    "runs",
    "gpu_hours",
    "cu_hours",
    "idle_gpu_hours",
    "booked_gpu_hours",
    "cost",
    "currency",
    "price_lines",
)


def row_fields(row: Row) -> dict[str, Any]:
    """A row as plain values: dates in ISO 8601, hours and money as exact decimal strings."""
    values = {name: getattr(row, name) for name in CSV_COLUMNS if name != "price_lines"}
    values["period_start"] = row.period_start.isoformat()
    # Which line priced what: "#<id> <price> <currency>/<unit>: <cost>", by id, "; " between.
    values["price_lines"] = "; ".join(str(row.lines[i]) for i in sorted(row.lines))
    for name in ("gpu_hours", "cu_hours", "idle_gpu_hours", "booked_gpu_hours", "cost"):
        values[name] = str(values[name])
    return values


def report_csv(rows: Iterable[Mapping[str, Any]]) -> str:
    """Rows (as :func:`row_fields` gives them) as CSV, after a header of the column names."""
    out = io.StringIO()
    writer = SafeWriter(out)
    writer.writerow(CSV_COLUMNS)
    for values in rows:
        writer.writerow([values.get(name, "") for name in CSV_COLUMNS])
    return out.getvalue()


def totals(rows: Iterable[Row]) -> dict[str, Decimal]:
    """Column sums, for the reconciliation and the report's last line."""
    summed: dict[str, Decimal] = defaultdict(Decimal)
    for row in rows:
        for name in ("gpu_hours", "cu_hours", "idle_gpu_hours", "booked_gpu_hours", "cost"):
            summed[name] += getattr(row, name)
    return dict(summed)
