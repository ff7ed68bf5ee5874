"""The booking pages of a course: book a lab, the week's calendar, change and cancel.

Who may do what is ``scheduling.services.teaching.course_role``: instructors and admins
book, change and cancel; TAs see the calendar read-only; anyone else gets a 404. The logic is
the services' (``scheduling.services.booking_series`` and ``.bookings``); these views only
wire forms to it.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.contrib import messages
from django.contrib.auth.models import User
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from portal.kit.confirm import confirm_first
from portal.kit.person import with_person
from portal.teaching.booking_forms import BookingEditForm, BookingForm, WeekForm
from scheduling.models import Booking, BookingSeries, default_profile_of
from scheduling.services import ServiceError
from scheduling.services.booking_series import (
    SeriesPlan,
    do_cancel_series,
    do_create_series,
    without_conflicts,
)
from scheduling.services.bookings import do_cancel_booking, do_change_booking
from scheduling.services.teaching import CourseRole, role_by_code


def _role(request: HttpRequest, code: str, *, teacher: bool) -> CourseRole:
    """The person's role on the course; 404 when they may not see (or change) its bookings."""
    role = role_by_code(request.user, code)
    if role is None or (teacher and not role.teacher):
        raise Http404(_("No such course."))
    return role


def _calendar_url(code: str, day: datetime | None = None) -> str:
    url = reverse("booking-calendar", kwargs={"code": code})
    if day is not None:
        url += "?week=" + timezone.localtime(day).date().isoformat()
    return url


@with_person
def book(request: HttpRequest, person: User, code: str) -> HttpResponse:
    """Book a lab: the form, then the per-date check, then the confirmation."""
    role = _role(request, code, teacher=True)
    course = role.course
    plan: SeriesPlan | None = None
    status = 200
    if request.method == "POST":
        form = BookingForm(request.POST, person=person, course_code=course.code)
        plan = form.checked if form.is_valid() else None
        step = form.cleaned_data.get("step") if plan is not None else "check"
        if plan is not None and step in ("confirm", "confirm_rest"):
            try:
                if step == "confirm_rest" and plan.conflicts:
                    plan = without_conflicts(person, plan)
                if plan.cautions and not form.cleaned_data.get("accept_cautions"):
                    # Nothing booked; the check stays on the page with its cautions.
                    form.add_error(
                        "accept_cautions",
                        _("Read the cautions of the check, then tick “Book anyway” to book."),
                    )
                    status = 400
                elif plan.fits:
                    series = do_create_series(person, plan)
                    messages.success(
                        request,
                        _("Booked: %(count)s date(s) of %(seats)s seats.")
                        % {"count": series.bookings.count(), "seats": series.seats},
                    )
                    return redirect(_calendar_url(course.code, plan.dates[0].starts_at))
                else:
                    not_booked = _(
                        "Not booked: some dates do not fit. Change them, or confirm without them."
                    )
                    messages.warning(request, not_booked)
            except ServiceError as error:
                form.add_service_error(error)
                plan = None
        if plan is None:
            status = 400
    else:
        form = BookingForm(
            initial={"profile": default_profile_of(course), "repeat": "once"},
            person=person,
            course_code=course.code,
        )
    return render(
        request,
        "courses/book.html",
        {"course": course, "form": form, "plan": plan},
        status=status,
    )


@with_person
def calendar(request: HttpRequest, person: User, code: str) -> HttpResponse:
    """The course's bookings in one week, in the viewer's time zone."""
    role = _role(request, code, teacher=False)
    course = role.course
    monday = WeekForm(request.GET).monday()
    zone = timezone.get_current_timezone()
    start = datetime.combine(monday, datetime.min.time(), tzinfo=zone)
    days = [monday + timedelta(days=k) for k in range(7)]
    end = datetime.combine(days[-1] + timedelta(days=1), datetime.min.time(), tzinfo=zone)
    bookings = (
        Booking.objects.filter(
            course=course, cancelled_at=None, starts_at__lt=end, ends_at__gt=start
        )
        .select_related("profile", "series")
        .order_by("starts_at", "pk")
    )
    by_day: dict = {d: [] for d in days}
    for b in bookings:
        day = timezone.localtime(b.starts_at).date()
        by_day.setdefault(day, []).append(b)
    week = [{"day": d, "bookings": by_day[d]} for d in days]
    return render(
        request,
        "courses/calendar.html",
        {
            "course": course,
            "can_change": role.teacher,
            "week": week,
            "monday": monday,
            "previous": (monday - timedelta(days=7)).isoformat(),
            "next": (monday + timedelta(days=7)).isoformat(),
            "today": timezone.localdate(),
        },
    )


def _course_booking(role: CourseRole, booking_id: int) -> Booking:
    booking = (
        Booking.objects.filter(course=role.course, pk=booking_id)
        .select_related("course", "profile")
        .first()
    )
    if booking is None:
        raise Http404(_("No such booking."))
    return booking


@with_person
def edit(request: HttpRequest, person: User, code: str, booking_id: int) -> HttpResponse:
    """Change one booking (seats, times, profile): checked again like a new one."""
    role = _role(request, code, teacher=True)
    booking = _course_booking(role, booking_id)
    status = 200
    if request.method == "POST":
        form = BookingEditForm(request.POST, person=person, booking=booking)
        change = form.checked if form.is_valid() else None
        if change is not None:
            try:
                booking = do_change_booking(person, change)
            except ServiceError as error:
                form.add_service_error(error)
            else:
                messages.success(request, _("The booking is changed."))
                return redirect(_calendar_url(role.course.code, booking.starts_at))
        status = 400
    else:
        form = BookingEditForm(
            initial=BookingEditForm.initial_for(booking), person=person, booking=booking
        )
    return render(
        request,
        "courses/_booking_edit.html",
        {"course": role.course, "booking": booking, "form": form},
        status=status,
    )


@with_person
@require_POST
def cancel(request: HttpRequest, person: User, code: str, booking_id: int) -> HttpResponse:
    role = _role(request, code, teacher=True)
    booking = _course_booking(role, booking_id)
    try:
        do_cancel_booking(person, booking)
        messages.success(request, _("The booking is cancelled."))
    except ServiceError as error:
        messages.warning(request, error.message)
    return redirect(_calendar_url(role.course.code, booking.starts_at))


@with_person
@require_POST
def cancel_series(request: HttpRequest, person: User, code: str, series_id: int) -> HttpResponse:
    role = _role(request, code, teacher=True)
    series = BookingSeries.objects.filter(course=role.course, pk=series_id).first()
    if series is None:
        raise Http404(_("No such booking."))
    if (ask := confirm_first(request, "cancel_series", _calendar_url(code))) is not None:
        return ask
    try:
        do_cancel_series(person, series)
        messages.success(request, _("Every booking of the series is cancelled."))
    except ServiceError as error:
        messages.warning(request, error.message)
    return redirect(_calendar_url(role.course.code))
