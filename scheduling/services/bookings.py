"""Class bookings: an instructor holds ``seats`` desktops of a profile for a time window."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from portal.models import Course

from ..choices import AuditKind
from ..models import AuditEvent, Booking, DesktopProfile, Slice
from . import Conflict, ServiceError
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


def can_book_for(user: User, course: Course) -> bool:
    return bool(user.is_staff) or course.instructors.filter(pk=user.pk).exists()


def fitting_slices(profile: DesktopProfile) -> int:
    """Slices in the pool (busy or not) on which one desktop of this profile could run."""
    return Slice.objects.filter(
        present=True,
        gpu__present=True,
        kind__in=list(profile.allowed_kinds),
        memory_mb__gte=profile.gpu_memory_min_mb,
    ).count()


def check_booking(
    user: User,
    course_code: str,
    profile_id: int,
    seats: int,
    starts_at: datetime,
    ends_at: datetime,
) -> BookingRequest:
    """Validate a booking; raise ServiceError naming the field at fault."""
    course = Course.objects.filter(code=course_code).first()
    if course is None:
        raise ServiceError(
            _("There is no course “%(course)s”.") % {"course": course_code}, field="course"
        )
    if not can_book_for(user, course):
        raise ServiceError(
            _("Only instructors of %(course)s can book for it.") % {"course": course.code},
            field="course",
        )
    profile = DesktopProfile.objects.filter(pk=profile_id, active=True).first()
    if profile is None:
        raise ServiceError(_("No such desktop profile. Pick one from the list."), field="profile")
    if not 1 <= seats <= MAX_SEATS:
        raise ServiceError(
            _("Seats must be between 1 and %(most)s.") % {"most": MAX_SEATS}, field="seats"
        )
    if ends_at <= starts_at:
        raise ServiceError(_("The window must end after it starts."), field="ends_at")
    if ends_at - starts_at > MAX_WINDOW:
        raise ServiceError(
            _("A booking window is at most 12 hours; book each day."), field="ends_at"
        )
    if starts_at < timezone.now() - timedelta(minutes=5):
        raise ServiceError(
            _("The window starts in the past; pick a later start."), field="starts_at"
        )
    if profile.gpu_count:
        capacity = fitting_slices(profile)
        if capacity < seats * profile.gpu_count:
            raise ServiceError(
                _(
                    "The pool has %(capacity)s slices that fit %(profile)s; %(seats)s seats "
                    "need %(need)s. Book fewer seats or another profile."
                )
                % {
                    "capacity": capacity,
                    "profile": profile.name,
                    "seats": seats,
                    "need": seats * profile.gpu_count,
                },
                field="seats",
            )
    return BookingRequest(course, profile, seats, starts_at, ends_at)


def do_create_booking(user: User, request: BookingRequest) -> Booking:
    with transaction.atomic():
        booking = Booking.objects.create(
            course=request.course,
            profile=request.profile,
            seats=request.seats,
            starts_at=request.starts_at,
            ends_at=request.ends_at,
            created_by=user,
        )
        AuditEvent.objects.create(
            kind=AuditKind.BOOKING_CREATED,
            actor=f"user:{user.get_username()}",
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
        AuditEvent.objects.create(
            kind=AuditKind.BOOKING_CANCELLED,
            actor=f"user:{user.get_username()}",
            data={"booking": booking.pk, "course": booking.course.code},
        )
        schedule_soon()
    booking.refresh_from_db()
    return booking
