"""Class bookings: an instructor holds ``seats`` desktops of a profile for a time window.

Every booking is checked before it is confirmed against the pool's slices that its profile
can use, less every other booking overlapping it in time (``engine.booking_fit``), and
checked again under a lock (:func:`scheduling.locks.lock_policy`) in the transaction that
creates or changes it, so two bookings confirmed at once never both take the last seats.
Series of bookings (weekly over a term) are in :mod:`.booking_series`; they reuse the
validation and the check here.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date, datetime, timedelta

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from django.utils import formats, timezone
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from people.models import Course

from .. import engine
from ..choices import AuditKind
from ..engine import fit_codes
from ..excerpt import excerpt
from ..locks import lock_policy
from ..models import Booking, DesktopProfile, Node, Slice
from . import Conflict, ServiceError
from .audit import record
from .billed import slice_units
from .kick import schedule_soon
from .warm import drop_warm

MAX_SEATS = 500
MAX_WINDOW = timedelta(hours=12)


@dataclass(frozen=True)
class BookingRequest:
    course: Course
    profile: DesktopProfile
    seats: int
    starts_at: datetime
    ends_at: datetime


@dataclass(frozen=True)
class BookingChange:
    booking: Booking
    profile: DesktopProfile
    seats: int
    starts_at: datetime
    ends_at: datetime


def can_book_for(user: User, course: Course) -> bool:
    return bool(user.is_staff) or course.instructors.filter(pk=user.pk).exists()


# -- validation, shared with booking_series --


def course_to_book(user: User, course_code: str) -> Course:
    course = Course.objects.filter(code=course_code).first()
    if course is None:
        raise ServiceError(
            _("There is no course “%(course)s”.") % {"course": excerpt(course_code)}, field="course"
        )
    if not can_book_for(user, course):
        raise ServiceError(
            _("Only instructors of %(course)s can book for it.") % {"course": course.code},
            field="course",
        )
    return course


def profile_to_book(profile_id: int | None) -> DesktopProfile:
    profile = (
        DesktopProfile.objects.filter(pk=profile_id, active=True).first()
        if profile_id is not None
        else None
    )
    if profile is None:
        raise ServiceError(_("No such desktop profile. Pick one from the list."), field="profile")
    return profile


def check_seats(seats: int) -> None:
    if not 1 <= seats <= MAX_SEATS:
        raise ServiceError(
            _("Seats must be between 1 and %(most)s.") % {"most": MAX_SEATS}, field="seats"
        )


def check_window(
    starts_at: datetime, ends_at: datetime, *, starts: str = "starts_at", ends: str = "ends_at"
) -> None:
    """A window that ends after it starts, lasts at most 12 hours, is not in the past and not
    past the booking horizon."""
    if ends_at <= starts_at:
        raise ServiceError(_("The window must end after it starts."), field=ends)
    if ends_at - starts_at > MAX_WINDOW:
        raise ServiceError(_("A booking window is at most 12 hours; book each day."), field=ends)
    if starts_at < timezone.now() - timedelta(minutes=5):
        raise ServiceError(_("The window starts in the past; pick a later start."), field=starts)
    check_horizon(timezone.localdate(starts_at), field=starts)


def horizon() -> date:
    """The last date a booking may be on: ``BOOKING_HORIZON_DAYS`` after today."""
    return timezone.localdate() + timedelta(days=settings.BOOKING_HORIZON_DAYS)


def check_horizon(day: date, *, field: str) -> None:
    """Refuse a date past the booking horizon (a year ahead by default)."""
    last = horizon()
    if day > last:
        raise ServiceError(
            _(
                "Bookings can be made up to %(days)d days ahead, until %(date)s; "
                "pick an earlier date."
            )
            % {"days": settings.BOOKING_HORIZON_DAYS, "date": formats.date_format(last)},
            field=field,
        )


# -- the capacity check --


def needs_of(profile: DesktopProfile) -> engine.Needs:
    return engine.Needs(
        profile_id=profile.pk,
        gpu_count=profile.gpu_count,
        kinds=tuple(profile.allowed_kinds or ()),
        gpu_memory_min_mb=profile.gpu_memory_min_mb,
        gpu_models=tuple(profile.gpu_models or ()),
        compute_min=profile.compute_min,
        cpus=profile.cpus,
        memory_mb=profile.memory_mb,
        name=profile.name,
    )


def pool_records() -> engine.Pool:
    """Every present slice and node of the pool, busy or not; cordoned or draining ones
    unavailable."""
    nodes = {n.pk: n for n in Node.objects.all()}
    slices = tuple(
        engine.PoolSlice(
            slice_id=s.pk,
            node_id=s.gpu.node_id,
            kind=s.kind,
            memory_mb=s.memory_mb,
            gpu_model=s.gpu.model,
            compute_units=slice_units(s.gpu.compute_units, s.milli),
            available=s.gpu.present
            and not s.gpu.cordoned  # a sick GPU: services/gpu_cordon.py
            and nodes[s.gpu.node_id].takes_new_work,
        )
        for s in Slice.objects.filter(present=True).select_related("gpu")
    )
    pool_nodes = tuple(
        engine.PoolNode(n.pk, float(n.cpu_count), n.memory_mb, n.takes_new_work)
        for n in nodes.values()
    )
    return engine.Pool(slices, pool_nodes)


def held_bookings(
    starts_at: datetime, ends_at: datetime, *, exclude: Iterable[int] = ()
) -> list[engine.HeldBooking]:
    """Bookings not cancelled that overlap ``[starts_at, ends_at)``, as the engine reads them."""
    rows = (
        Booking.objects.filter(cancelled_at=None, starts_at__lt=ends_at, ends_at__gt=starts_at)
        .exclude(pk__in=list(exclude))
        .select_related("course", "profile")
    )
    return [
        engine.HeldBooking(
            b.pk, needs_of(b.profile), b.seats, b.starts_at, b.ends_at, label=b.course.code
        )
        for b in rows
    ]


def fit_words(fit: engine.BookingFit, profile_name: str) -> str:
    """Why a booking fits or not, in the reader's language."""
    values = {
        "seats": fit.seats,
        "most": fit.most_seats,
        "capacity": fit.capacity,
        "profile": profile_name,
        "bookings": ", ".join(fit.blocking),
    }
    if fit.code == fit_codes.FITS:
        return ngettext("%(seats)s seat fits.", "All %(seats)s seats fit.", fit.seats) % values
    if fit.code == fit_codes.NO_FITTING_SLICES:
        return _("No GPU in the pool can run %(profile)s.") % values
    if fit.code == fit_codes.POOL_TOO_SMALL and fit.slices:
        return _(
            "The pool has %(capacity)s slices that fit %(profile)s; %(seats)s seats "
            "need %(need)s. Book fewer seats or another profile."
        ) % {**values, "capacity": fit.slices, "need": fit.need}
    if fit.code == fit_codes.NO_NODE_ROOM:
        return _("The nodes have CPU and memory for %(most)s desktops of %(profile)s.") % values
    if fit.blocking and not fit.most_seats:
        return (
            _("Other bookings at that time (%(bookings)s) take every desktop it could use.")
            % values
        )
    if fit.blocking:
        return (
            _(
                "Other bookings at that time (%(bookings)s) leave room for %(most)s of "
                "%(seats)s seats."
            )
            % values
        )
    return _("Other bookings at that time leave room for %(most)s of %(seats)s seats.") % values


def window_words(starts_at: datetime, ends_at: datetime) -> str:
    """A window in the reader's zone: ``Mon 3 Mar 2027, 09:00–11:00``."""
    a, z = timezone.localtime(starts_at), timezone.localtime(ends_at)
    day = formats.date_format(a, "D j M Y")
    return f"{day}, {formats.time_format(a, 'H:i')}–{formats.time_format(z, 'H:i')}"


def alternative_words(alternative: engine.Alternative) -> str:
    values = {
        "seats": alternative.seats,
        "window": window_words(alternative.starts_at, alternative.ends_at),
        "profile": alternative.profile_name,
    }
    if alternative.kind == fit_codes.ALTERNATIVE_SEATS:
        return _("Book %(seats)s seats instead.") % values
    if alternative.kind == fit_codes.ALTERNATIVE_TIME:
        return _("All seats fit %(window)s.") % values
    return _("All seats fit with %(profile)s.") % values


def booking_window_fit(
    profile: DesktopProfile,
    seats: int,
    starts_at: datetime,
    ends_at: datetime,
    *,
    exclude: Iterable[int] = (),
    pool: engine.Pool | None = None,
) -> engine.BookingFit:
    return engine.booking_fit(
        pool or pool_records(),
        needs_of(profile),
        seats,
        starts_at,
        ends_at,
        held_bookings(starts_at, ends_at, exclude=exclude),
    )


def _require_fit(
    profile: DesktopProfile,
    seats: int,
    starts_at: datetime,
    ends_at: datetime,
    *,
    exclude: Iterable[int] = (),
    conflict: bool = False,
) -> None:
    fit = booking_window_fit(profile, seats, starts_at, ends_at, exclude=exclude)
    if fit.fits:
        return
    words = fit_words(fit, profile.name)
    if fit.code == fit_codes.POOL_TOO_SMALL:
        pass  # the sentence says what to do
    elif fit.most_seats:
        words += " " + _("Book fewer seats, another time or another profile.")
    else:
        words += " " + _("Book another time or another profile.")
    if conflict:
        raise Conflict(words)
    raise ServiceError(words, field="seats")


# -- single bookings --


def check_booking(
    user: User,
    course_code: str,
    profile_id: int,
    seats: int,
    starts_at: datetime,
    ends_at: datetime,
) -> BookingRequest:
    """Validate a booking and check it fits; raise ServiceError naming the field at fault."""
    course = course_to_book(user, course_code)
    profile = profile_to_book(profile_id)
    check_seats(seats)
    check_window(starts_at, ends_at)
    _require_fit(profile, seats, starts_at, ends_at)
    return BookingRequest(course, profile, seats, starts_at, ends_at)


def do_create_booking(user: User, request: BookingRequest) -> Booking:
    """Create the booking; Conflict when another booking took its capacity meanwhile."""
    with transaction.atomic():
        lock_policy()
        _require_fit(
            request.profile, request.seats, request.starts_at, request.ends_at, conflict=True
        )
        booking = Booking.objects.create(
            course=request.course,
            profile=request.profile,
            seats=request.seats,
            starts_at=request.starts_at,
            ends_at=request.ends_at,
            created_by=user,
        )
        record(
            AuditKind.BOOKING_CREATED,
            f"user:{user.get_username()}",
            data={
                "booking": booking.pk,
                "course": request.course.code,
                "profile": request.profile.slug,
                "seats": request.seats,
                "starts_at": request.starts_at.isoformat(),
                "ends_at": request.ends_at.isoformat(),
            },
        )
        schedule_soon()
    return booking


def check_booking_change(
    user: User,
    booking: Booking,
    *,
    seats: int | None = None,
    starts_at: datetime | None = None,
    ends_at: datetime | None = None,
    profile_id: int | None = None,
) -> BookingChange:
    """A change of one booking (seats, window, profile), checked like a new one."""
    if not can_book_for(user, booking.course):
        raise ServiceError(
            _("Only instructors of %(course)s can change this booking.")
            % {"course": booking.course.code}
        )
    if booking.cancelled_at is not None:
        raise Conflict(_("This booking is cancelled; book again instead."))
    if booking.ends_at <= timezone.now():
        raise Conflict(_("This booking is over; it cannot change."))
    profile = booking.profile if profile_id is None else profile_to_book(profile_id)
    seats = booking.seats if seats is None else seats
    starts_at = starts_at or booking.starts_at
    ends_at = ends_at or booking.ends_at
    check_seats(seats)
    if (starts_at, ends_at) != (booking.starts_at, booking.ends_at):
        check_window(starts_at, ends_at)
    _require_fit(profile, seats, starts_at, ends_at, exclude=[booking.pk])
    return BookingChange(booking, profile, seats, starts_at, ends_at)


def do_change_booking(user: User, change: BookingChange) -> Booking:
    """Apply a checked change; Conflict when it no longer fits or the booking went."""
    booking = change.booking
    with transaction.atomic():
        lock_policy()
        _require_fit(
            change.profile,
            change.seats,
            change.starts_at,
            change.ends_at,
            exclude=[booking.pk],
            conflict=True,
        )
        before = {
            "profile": booking.profile.slug,
            "seats": booking.seats,
            "starts_at": booking.starts_at.isoformat(),
            "ends_at": booking.ends_at.isoformat(),
        }
        updated = Booking.objects.filter(pk=booking.pk, cancelled_at=None).update(
            profile=change.profile,
            seats=change.seats,
            starts_at=change.starts_at,
            ends_at=change.ends_at,
        )
        if not updated:
            raise Conflict(_("This booking is cancelled; book again instead."))
        if (change.profile.pk, change.starts_at, change.ends_at) != (
            booking.profile_id,
            booking.starts_at,
            booking.ends_at,
        ):
            drop_warm(booking)  # started for the old profile or window
        record(
            AuditKind.BOOKING_CHANGED,
            f"user:{user.get_username()}",
            data={
                "booking": booking.pk,
                "course": booking.course.code,
                "before": before,
                "after": {
                    "profile": change.profile.slug,
                    "seats": change.seats,
                    "starts_at": change.starts_at.isoformat(),
                    "ends_at": change.ends_at.isoformat(),
                },
            },
        )
        schedule_soon()
    booking.refresh_from_db()
    return booking


def do_cancel_booking(user: User, booking: Booking) -> Booking:
    if not can_book_for(user, booking.course):
        raise ServiceError(
            _("Only instructors of %(course)s can cancel this booking.")
            % {"course": booking.course.code}
        )
    with transaction.atomic():
        updated = Booking.objects.filter(pk=booking.pk, cancelled_at=None).update(
            cancelled_at=timezone.now()
        )
        if not updated:
            raise Conflict(_("This booking is already cancelled."))
        # Its unclaimed warm desktops go now: agents stop them at their next poll.
        drop_warm(booking)
        record(
            AuditKind.BOOKING_CANCELLED,
            f"user:{user.get_username()}",
            data={"booking": booking.pk, "course": booking.course.code},
        )
        schedule_soon()
    booking.refresh_from_db()
    return booking
