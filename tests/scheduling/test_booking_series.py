"""Booking a lab: series checked date by date, confirmed whole, under a lock."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, date, datetime, time, timedelta

import pytest
from django.db import connection
from django.utils import timezone

from people.models import Course
from scheduling.choices import AuditKind
from scheduling.engine import fit_codes
from scheduling.models import AuditEvent, Booking, BookingSeries, DesktopProfile, PoolPolicy
from scheduling.services import Conflict, ServiceError
from scheduling.services.booking_series import (
    check_series,
    do_cancel_series,
    do_create_series,
    without_conflicts,
)
from scheduling.services.bookings import (
    check_booking,
    check_booking_change,
    do_cancel_booking,
    do_change_booking,
    do_create_booking,
)

NINE, ELEVEN = time(9, 0), time(11, 0)


def next_monday(weeks: int = 2) -> date:
    today = timezone.localdate()
    return today + timedelta(days=7 * weeks - today.weekday())


@pytest.fixture
def course(owner):
    course = Course.objects.create(code="cs101", title="Intro")
    course.instructors.add(owner)
    return course


@pytest.fixture
def shares_profile(db):
    return DesktopProfile.objects.create(
        slug="light", name="Light", image="x", gpu_count=1, allowed_kinds=["share"]
    )


def series(owner, profile, seats=5, *, first=None, last=None, weekly=True, skip=(), **kw):
    first = first or next_monday()
    last = last or first + timedelta(weeks=3)
    return check_series(
        owner, "cs101", profile.pk, seats, first, last, weekly, NINE, ELEVEN, skip, **kw
    )


def hold(course, profile, day: date, seats: int, zone: str = "UTC") -> Booking:
    plan = series(
        course.instructors.first(), profile, seats, first=day, weekly=False, time_zone=zone
    )
    return do_create_series(course.instructors.first(), plan).bookings.get()


def test_a_weekly_series_lists_its_one_conflicting_date_with_alternatives(
    owner, course, profile, shares_profile, pool
):
    second = next_monday() + timedelta(weeks=1)
    hold(course, profile, second, 8)
    plan = series(owner, profile, 5, time_zone="UTC")
    assert [d.day for d in plan.dates] == [next_monday() + timedelta(weeks=k) for k in range(4)]
    assert not plan.fits
    [conflict] = plan.conflicts
    assert conflict.day == second
    assert conflict.fit.code == fit_codes.TAKEN_BY_BOOKINGS and conflict.fit.most_seats == 2
    assert "cs101" in conflict.words
    kinds = {a.kind: a for a in conflict.alternatives}
    assert kinds[fit_codes.ALTERNATIVE_SEATS].seats == 2
    later = kinds[fit_codes.ALTERNATIVE_TIME]
    assert later.starts_at == datetime.combine(second, time(11, 0), tzinfo=UTC)
    assert fit_codes.ALTERNATIVE_PROFILE not in kinds  # 2 shares cannot hold 5 seats
    assert len(conflict.alternative_words) == 2
    with pytest.raises(Conflict):
        do_create_series(owner, plan)
    assert BookingSeries.objects.count() == 1  # only the one booking made above


def test_skip_dates_and_confirming_without_the_conflicting_dates(owner, course, profile, pool):
    second = next_monday() + timedelta(weeks=1)
    hold(course, profile, second, 8)
    plan = without_conflicts(owner, series(owner, profile, 5))
    assert plan.fits and second in plan.skip_dates and len(plan.dates) == 3
    made = do_create_series(owner, plan)
    assert made.bookings.count() == 3
    assert made.skip_dates == [second.isoformat()]
    event = AuditEvent.objects.filter(kind=AuditKind.BOOKING_SERIES_CREATED).last()
    assert event.data["series"] == made.pk and len(event.data["bookings"]) == 3


def test_every_date_skipped_is_refused_on_the_skip_field(owner, course, profile, pool):
    first = next_monday()
    with pytest.raises(ServiceError) as refused:
        series(owner, profile, 1, first=first, weekly=False, skip=[first])
    assert refused.value.field == "skip_dates"


def test_field_errors_name_the_field(owner, course, profile, pool, stranger):
    with pytest.raises(ServiceError) as refused:
        check_series(owner, "cs101", profile.pk, 5, next_monday(), None, False, ELEVEN, NINE)
    assert refused.value.field == "ends"
    with pytest.raises(ServiceError) as refused:
        series(owner, profile, 0)
    assert refused.value.field == "seats"
    with pytest.raises(ServiceError) as refused:
        series(owner, profile, 1, first=date(2020, 1, 6), last=date(2020, 2, 3))
    assert refused.value.field == "first_date"
    with pytest.raises(ServiceError) as refused:
        series(stranger, profile, 1)
    assert refused.value.field == "course"


def test_times_of_day_hold_across_a_change_of_daylight_saving_time(
    owner, course, profile, pool, settings
):
    # Europe/Berlin moves to summer time on Sunday 31 March 2030 (past the default horizon).
    settings.BOOKING_HORIZON_DAYS = 366 * 10
    plan = series(
        owner,
        profile,
        2,
        first=date(2030, 3, 25),
        last=date(2030, 4, 8),
        time_zone="Europe/Berlin",
    )
    starts = [d.starts_at.astimezone(UTC).time() for d in plan.dates]
    assert starts == [time(8, 0), time(7, 0), time(7, 0)]
    made = do_create_series(owner, plan)
    assert made.time_zone == "Europe/Berlin"
    assert [b.starts_at.astimezone(UTC).hour for b in made.bookings.order_by("starts_at")] == [
        8,
        7,
        7,
    ]


def test_three_overlapping_bookings_the_second_and_third_are_refused(owner, course, profile, pool):
    a = datetime.combine(next_monday(), NINE, tzinfo=UTC)
    do_create_booking(
        owner, check_booking(owner, "cs101", profile.pk, 6, a, a + timedelta(hours=2))
    )
    for start in (a, a + timedelta(hours=1)):
        with pytest.raises(ServiceError) as refused:
            check_booking(owner, "cs101", profile.pk, 6, start, start + timedelta(hours=2))
        assert refused.value.field == "seats"
        assert "4 of 6" in refused.value.message
    assert Booking.objects.count() == 1


def test_editing_one_booking_is_checked_and_audited(owner, course, profile, pool):
    first = hold(course, profile, next_monday(), 4)
    other = hold(course, profile, next_monday(), 4)
    with pytest.raises(ServiceError):
        check_booking_change(owner, other, seats=7)
    change = check_booking_change(
        owner, other, seats=6, starts_at=other.starts_at + timedelta(minutes=30)
    )
    changed = do_change_booking(owner, change)
    assert changed.seats == 6 and changed.starts_at == first.starts_at + timedelta(minutes=30)
    event = AuditEvent.objects.get(kind=AuditKind.BOOKING_CHANGED)
    assert event.data["before"]["seats"] == 4 and event.data["after"]["seats"] == 6
    do_cancel_booking(owner, changed)
    assert AuditEvent.objects.filter(
        kind=AuditKind.BOOKING_CANCELLED, data__booking=changed.pk
    ).exists()


def test_cancelling_a_series_cancels_its_bookings_audited(owner, course, profile, pool, stranger):
    made = do_create_series(owner, series(owner, profile, 3))
    with pytest.raises(ServiceError):
        do_cancel_series(stranger, made)
    do_cancel_series(owner, made)
    assert not made.bookings.filter(cancelled_at=None).exists()
    event = AuditEvent.objects.get(kind=AuditKind.BOOKING_CANCELLED, data__series=made.pk)
    assert len(event.data["bookings"]) == 4
    with pytest.raises(Conflict):
        do_cancel_series(owner, made)


@pytest.mark.django_db(transaction=True)
def test_two_series_confirmed_at_once_only_one_passes(owner, course, profile, pool):
    PoolPolicy.current()
    plans = [series(owner, profile, 6), series(owner, profile, 6)]
    assert all(p.fits for p in plans)  # each alone fits: 6 of 10 slices
    start = threading.Barrier(2)

    def confirm(plan) -> str:
        start.wait()
        try:
            do_create_series(owner, plan)
            return "created"
        except Conflict:
            return "refused"
        finally:
            connection.close()

    with ThreadPoolExecutor(2) as threads:
        results = sorted(threads.map(confirm, plans))
    assert results == ["created", "refused"]
    assert BookingSeries.objects.count() == 1
    assert Booking.objects.count() == 4


@pytest.mark.django_db(transaction=True)
def test_two_single_bookings_confirmed_at_once_only_one_passes(owner, course, profile, pool):
    PoolPolicy.current()
    a = datetime.combine(next_monday(), NINE, tzinfo=UTC)
    checked = [
        check_booking(owner, "cs101", profile.pk, 6, a, a + timedelta(hours=2)) for _ in range(2)
    ]
    start = threading.Barrier(2)

    def confirm(request) -> str:
        start.wait()
        try:
            do_create_booking(owner, request)
            return "created"
        except Conflict:
            return "refused"
        finally:
            connection.close()

    with ThreadPoolExecutor(2) as threads:
        assert sorted(threads.map(confirm, checked)) == ["created", "refused"]
    assert Booking.objects.count() == 1
