"""Booking a lab: seats × profile × window, once or weekly over a term, with dates to skip.

:func:`check_series` validates the request and checks every date against the pool (the
capacity check of :mod:`.bookings`, ``engine.booking_fit``), with the nearest alternatives
for each date that does not fit. :func:`do_create_series` confirms the whole series only
when every date still fits, checked again under the booking lock. Times of day are in the
booker's zone (the active one), stored with the series and converted per date, so a class
at 09:00 stays at 09:00 across a change of daylight-saving time.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import Q
from django.utils import formats, timezone
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from people.models import Course

from .. import engine
from ..choices import AuditKind
from ..excerpt import excerpt
from ..locks import lock_policy
from ..models import Booking, BookingSeries, DesktopProfile
from . import Conflict, ServiceError
from .audit import record
from .bookings import (
    alternative_words,
    can_book_for,
    check_horizon,
    check_seats,
    check_window,
    course_to_book,
    fit_words,
    held_bookings,
    needs_of,
    pool_records,
    profile_to_book,
)
from .kick import schedule_soon
from .warm import drop_warm

MAX_TERM = timedelta(days=366)
SHIFT_STEP = timedelta(minutes=30)
DAY_OPENS = time(8, 0)  # alternative windows lie within 08:00–22:00 local
DAY_CLOSES = time(22, 0)


@dataclass(frozen=True)
class DatePlan:
    """One date of a series: its window, whether it fits, and what would fit instead."""

    day: date
    starts_at: datetime
    ends_at: datetime
    fit: engine.BookingFit
    alternatives: tuple[engine.Alternative, ...] = ()
    profile_name: str = ""

    @property
    def fits(self) -> bool:
        return self.fit.fits

    @property
    def words(self) -> str:
        return fit_words(self.fit, self.profile_name)

    @property
    def alternative_words(self) -> list[str]:
        return [alternative_words(a) for a in self.alternatives]


@dataclass(frozen=True)
class SeriesPlan:
    course: Course
    profile: DesktopProfile
    seats: int
    first_date: date
    last_date: date
    weekly: bool
    starts: time
    ends: time
    time_zone: str
    skip_dates: tuple[date, ...]
    dates: tuple[DatePlan, ...] = field(default=())
    # What fits but is likely a mistake (issue 38, the walk: three identical weekly bookings
    # were each accepted): the teacher confirms them explicitly.
    cautions: tuple[str, ...] = ()

    @property
    def fits(self) -> bool:
        return bool(self.dates) and all(d.fits for d in self.dates)

    @property
    def conflicts(self) -> list[DatePlan]:
        return [d for d in self.dates if not d.fits]


def series_days(
    first_date: date, last_date: date, weekly: bool, skip: Iterable[date] = ()
) -> list[date]:
    """The dates a series holds: the first date, then every 7 days to the last when weekly."""
    skipped = set(skip)
    days = []
    day = first_date
    while day <= (last_date if weekly else first_date):
        if day not in skipped:
            days.append(day)
        day += timedelta(days=7)
    return days


def local_window(day: date, starts: time, ends: time, zone: ZoneInfo) -> tuple[datetime, datetime]:
    """The window of ``day`` in ``zone`` (zoneinfo: right on both sides of a DST change)."""
    return datetime.combine(day, starts, tzinfo=zone), datetime.combine(day, ends, tzinfo=zone)


def shifted_windows(
    day: date, starts: time, ends: time, zone: ZoneInfo
) -> list[tuple[datetime, datetime]]:
    """The same window moved by 30-minute steps within 08:00–22:00 local, nearest first."""
    start = datetime.combine(day, starts)
    length = datetime.combine(day, ends) - start
    opens, closes = datetime.combine(day, DAY_OPENS), datetime.combine(day, DAY_CLOSES)
    now = timezone.now()
    out = []
    for step in range(1, 29):
        for sign in (-1, 1):
            a = start + sign * step * SHIFT_STEP
            if a < opens or a + length > closes:
                continue
            window = (a.replace(tzinfo=zone), (a + length).replace(tzinfo=zone))
            if window[0] > now:
                out.append(window)
    return out


def _zone(name: str | None) -> tuple[str, ZoneInfo]:
    name = name or timezone.get_current_timezone_name()
    try:
        return name, ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as error:
        raise ServiceError(
            _("%(name)s is not a time zone we know.") % {"name": excerpt(name)}, field="time_zone"
        ) from error


def _plan_dates(
    profile: DesktopProfile,
    seats: int,
    days: Sequence[date],
    starts: time,
    ends: time,
    zone: ZoneInfo,
    *,
    exclude: Iterable[int] = (),
    alternatives: bool = True,
) -> tuple[DatePlan, ...]:
    if not days:
        return ()
    windows = [local_window(d, starts, ends, zone) for d in days]
    pool = pool_records()
    needs = needs_of(profile)
    others = held_bookings(
        windows[0][0] - timedelta(days=1), windows[-1][1] + timedelta(days=1), exclude=exclude
    )
    profiles = [
        needs_of(p) for p in DesktopProfile.objects.filter(active=True).exclude(pk=profile.pk)
    ]
    plans = []
    for day, (a, z) in zip(days, windows, strict=True):
        fit = engine.booking_fit(pool, needs, seats, a, z, others)
        found: list[engine.Alternative] = []
        if not fit.fits and alternatives:
            found = engine.booking_alternatives(
                pool,
                needs,
                seats,
                a,
                z,
                others,
                windows=shifted_windows(day, starts, ends, zone),
                profiles=profiles,
            )
        plans.append(DatePlan(day, a, z, fit, tuple(found), profile.name))
    return tuple(plans)


def check_series(
    user: User,
    course_code: str,
    profile_id: int | None,
    seats: int,
    first_date: date,
    last_date: date | None,
    weekly: bool,
    starts: time,
    ends: time,
    skip_dates: Iterable[date] = (),
    *,
    time_zone: str | None = None,
) -> SeriesPlan:
    """Validate a series and check every date; ServiceError names the field at fault."""
    course = course_to_book(user, course_code)
    profile = profile_to_book(profile_id)
    check_seats(seats)
    zone_name, zone = _zone(time_zone)
    last = last_date if weekly and last_date else first_date
    check_horizon(first_date, field="first_date")
    check_horizon(last, field="last_date")
    if last < first_date:
        raise ServiceError(_("The last date must not be before the first date."), field="last_date")
    if last - first_date > MAX_TERM:
        raise ServiceError(_("A series spans at most a year; book each term."), field="last_date")
    if ends <= starts:
        raise ServiceError(_("The end time must be after the start time."), field="ends")
    skip = tuple(sorted(set(skip_dates)))
    days = series_days(first_date, last, weekly, skip)
    if not days:
        raise ServiceError(
            _("Every date of the series is skipped; nothing to book."), field="skip_dates"
        )
    for day in days:
        a, z = local_window(day, starts, ends, zone)
        try:
            check_window(a, z, starts="first_date", ends="ends")
        except ServiceError as error:
            if error.field == "first_date":
                raise ServiceError(
                    _("The window on %(date)s has already started; pick a later first date.")
                    % {"date": formats.date_format(day)},
                    field="first_date",
                ) from error
            raise
    dates = _plan_dates(profile, seats, days, starts, ends, zone)
    return SeriesPlan(
        course,
        profile,
        seats,
        first_date,
        last,
        weekly,
        starts,
        ends,
        zone_name,
        skip,
        dates,
        cautions(course, seats, dates),
    )


def cautions(course: Course, seats: int, dates: Iterable[DatePlan]) -> tuple[str, ...]:
    """What the teacher should confirm knowingly: dates on which the course already has a
    booking at overlapping times (its seats would add up), and more seats than the roster
    holds. Two queries."""
    said = []
    overlap = Q()
    for d in dates:
        overlap |= Q(starts_at__lt=d.ends_at, ends_at__gt=d.starts_at)
    booked = (
        list(
            Booking.objects.filter(overlap, course=course, cancelled_at=None).values_list(
                "starts_at", "ends_at", "seats"
            )
        )
        if overlap
        else []
    )
    clashing = [
        d.day for d in dates if any(a < d.ends_at and d.starts_at < z for a, z, _seats in booked)
    ]
    if clashing:
        said.append(
            _(
                "%(course)s already has a booking at overlapping times on %(dates)s: these "
                "seats would come on top of it. Is this a second booking by mistake?"
            )
            % {
                "course": course.code,
                "dates": ", ".join(formats.date_format(day) for day in clashing),
            }
        )
    roster = course.students.count()
    if seats > roster:
        said.append(
            ngettext(
                "%(seats)s seats is more than the %(roster)s student on the roster of %(course)s.",
                "%(seats)s seats is more than the %(roster)s students on the roster of %(course)s.",
                roster,
            )
            % {"seats": seats, "roster": roster, "course": course.code}
        )
    return tuple(said)


def without_conflicts(user: User, plan: SeriesPlan) -> SeriesPlan:
    """The same series with the dates that do not fit added to its skip dates."""
    skip = set(plan.skip_dates) | {d.day for d in plan.conflicts}
    return check_series(
        user,
        plan.course.code,
        plan.profile.pk,
        plan.seats,
        plan.first_date,
        plan.last_date,
        plan.weekly,
        plan.starts,
        plan.ends,
        skip,
        time_zone=plan.time_zone,
    )


def do_create_series(user: User, plan: SeriesPlan) -> BookingSeries:
    """Create the series and one booking per date; Conflict if any date no longer fits."""
    if not can_book_for(user, plan.course):
        raise ServiceError(
            _("Only instructors of %(course)s can book for it.") % {"course": plan.course.code},
            field="course",
        )
    zone = ZoneInfo(plan.time_zone)
    days = [d.day for d in plan.dates]
    with transaction.atomic():
        lock_policy()  # confirmations queue here; each one counts the others' bookings
        now = _plan_dates(
            plan.profile, plan.seats, days, plan.starts, plan.ends, zone, alternatives=False
        )
        refused = [d for d in now if not d.fits]
        if refused or not now:
            raise Conflict(
                _("These dates no longer fit: %(dates)s. Check again.")
                % {"dates": ", ".join(formats.date_format(d.day) for d in refused)}
            )
        series = BookingSeries.objects.create(
            course=plan.course,
            profile=plan.profile,
            seats=plan.seats,
            first_date=plan.first_date,
            last_date=plan.last_date,
            weekly=plan.weekly,
            starts=plan.starts,
            ends=plan.ends,
            time_zone=plan.time_zone,
            skip_dates=[d.isoformat() for d in plan.skip_dates],
            created_by=user,
        )
        bookings = Booking.objects.bulk_create(
            Booking(
                series=series,
                course=plan.course,
                profile=plan.profile,
                seats=plan.seats,
                starts_at=d.starts_at,
                ends_at=d.ends_at,
                created_by=user,
            )
            for d in now
        )
        record(
            AuditKind.BOOKING_SERIES_CREATED,
            f"user:{user.get_username()}",
            data={
                "series": series.pk,
                "course": plan.course.code,
                "profile": plan.profile.slug,
                "seats": plan.seats,
                "weekly": plan.weekly,
                "dates": [d.isoformat() for d in days],
                "starts": plan.starts.isoformat(),
                "ends": plan.ends.isoformat(),
                "time_zone": plan.time_zone,
                "bookings": [b.pk for b in bookings],
            },
        )
        schedule_soon()
    return series


def do_cancel_series(user: User, series: BookingSeries) -> BookingSeries:
    """Cancel the series and its bookings not over yet (their warm desktops go at once)."""
    if not can_book_for(user, series.course):
        raise ServiceError(
            _("Only instructors of %(course)s can cancel this booking.")
            % {"course": series.course.code}
        )
    now = timezone.now()
    with transaction.atomic():
        updated = BookingSeries.objects.filter(pk=series.pk, cancelled_at=None).update(
            cancelled_at=now
        )
        if not updated:
            raise Conflict(_("This series is already cancelled."))
        going = list(Booking.objects.filter(series=series, cancelled_at=None, ends_at__gt=now))
        Booking.objects.filter(pk__in=[b.pk for b in going]).update(cancelled_at=now)
        for booking in going:
            drop_warm(booking)
        record(
            AuditKind.BOOKING_CANCELLED,
            f"user:{user.get_username()}",
            data={
                "series": series.pk,
                "course": series.course.code,
                "bookings": [b.pk for b in going],
            },
        )
        schedule_soon()
    series.refresh_from_db()
    return series
