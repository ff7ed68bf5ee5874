"""Bookings are bounded in time (issue 25, finding 5b): nothing past the booking horizon
(``BOOKING_HORIZON_DAYS``, a year by default) nor in the past, with a clear error on the
field at fault, in the form and the API; a term-long weekly series still fits."""

from __future__ import annotations

from datetime import time, timedelta

import pytest
from django.utils import timezone

from people.models import Course
from scheduling.models import Booking, BookingSeries
from scheduling.services import ServiceError
from scheduling.services.booking_series import check_series

from .test_booking_pages import api, form, next_monday, signed

pytestmark = pytest.mark.django_db


@pytest.fixture
def course(owner):
    course = Course.objects.create(code="cs101", title="Intro")
    course.instructors.add(owner)
    return course


def test_the_api_refuses_a_booking_in_year_9999_on_its_start(owner, course, profile, pool):
    answer = api(owner).post(
        "/api/v1/bookings/",
        {
            "course": "cs101",
            "profile": profile.pk,
            "seats": 2,
            "starts_at": "9999-12-30T09:00:00Z",
            "ends_at": "9999-12-30T11:00:00Z",
        },
        format="json",
    )
    assert answer.status_code == 400, answer.content
    [message] = answer.json()["starts_at"]
    assert message.startswith("Bookings can be made up to 366 days ahead, until ")
    assert not Booking.objects.exists()


def test_the_series_api_refuses_a_last_date_past_the_horizon(owner, course, profile, pool):
    first = next_monday()
    body = {
        "course": "cs101",
        "profile": profile.pk,
        "seats": 2,
        "weekly": True,
        "first_date": first.isoformat(),
        "last_date": "9999-12-27",
        "starts": "09:00",
        "ends": "11:00",
    }
    answer = api(owner).post("/api/v1/booking-series/check/", body, format="json")
    assert answer.status_code == 400, answer.content
    assert "pick an earlier date" in answer.json()["last_date"][0]
    assert not BookingSeries.objects.exists()


def test_the_booking_form_says_so_next_to_the_first_date(owner, course, profile, pool):
    far = timezone.localdate() + timedelta(days=400)
    page = signed(owner).post(
        "/courses/cs101/book/",
        form(profile, repeat="once", first_date=far.isoformat(), last_date=""),
    )
    assert page.status_code == 400
    assert "Bookings can be made up to 366 days ahead" in page.content.decode()
    assert not Booking.objects.exists()


def test_a_term_long_weekly_series_still_fits_and_a_shorter_horizon_is_honoured(
    owner, course, profile, pool, settings
):
    first = next_monday()
    plan = check_series(
        owner, "cs101", profile.pk, 2, first, first + timedelta(weeks=16), True, time(9), time(11)
    )
    assert len(plan.dates) == 17
    settings.BOOKING_HORIZON_DAYS = 30
    with pytest.raises(ServiceError) as refused:
        check_series(
            owner,
            "cs101",
            profile.pk,
            2,
            first,
            first + timedelta(weeks=16),
            True,
            time(9),
            time(11),
        )
    assert refused.value.field == "last_date"
