"""The booking pages and API: book a lab (check, confirm), the calendar, change and cancel."""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta

import pytest
from django.test import Client
from django.utils import timezone
from guardian.shortcuts import assign_perm
from rest_framework.test import APIClient

from people.models import Course, Member
from scheduling.choices import AuditKind
from scheduling.models import AuditEvent, Booking, BookingSeries
from scheduling.services.booking_series import check_series, do_create_series

pytestmark = pytest.mark.django_db


def next_monday(weeks: int = 2) -> date:
    today = timezone.localdate()
    return today + timedelta(days=7 * weeks - today.weekday())


@pytest.fixture
def course(owner, stranger, make_user):
    """cs101, taught by ada, with a roster of 12 (more than any booking here asks for)."""
    course = Course.objects.create(code="cs101", title="Intro")
    course.instructors.add(owner)
    course.students.add(stranger, *(make_user(f"s{i:02d}") for i in range(11)))
    return course


@pytest.fixture
def ta(make_user, course):
    user = make_user("tia")
    assign_perm("portal.view_live_class", user, course)
    return user


def signed(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def form(profile, **fields) -> dict:
    first = next_monday()
    return {
        "profile": profile.pk,
        "seats": 5,
        "repeat": "weekly",
        "first_date": first.isoformat(),
        "last_date": (first + timedelta(weeks=3)).isoformat(),
        "starts": "09:00",
        "ends": "11:00",
        "skip_dates": "",
        "step": "check",
        **fields,
    }


def hold(owner, profile, day: date, seats: int) -> Booking:
    plan = check_series(owner, "cs101", profile.pk, seats, day, day, False, time(9), time(11))
    return do_create_series(owner, plan).bookings.get()


def test_only_instructors_and_admins_may_book_others_get_404(
    owner, stranger, ta, admin_user, make_user, course, profile
):
    assert signed(owner).get("/courses/cs101/book/").status_code == 200
    assert signed(admin_user).get("/courses/cs101/book/").status_code == 200
    for user in (stranger, ta, make_user("zed")):
        assert signed(user).get("/courses/cs101/book/").status_code == 404
        assert signed(user).post("/courses/cs101/book/", form(profile)).status_code == 404
    assert signed(owner).get("/courses/nope/book/").status_code == 404
    assert Client().get("/courses/cs101/book/").status_code == 302  # to the login page


def test_the_form_labels_every_field_and_shows_what_a_profile_gives(owner, course, profile):
    page = signed(owner).get("/courses/cs101/book/").content.decode()
    for name in ("profile", "seats", "first_date", "last_date", "starts", "ends", "skip_dates"):
        assert f'for="id_{name}"' in page
    assert "AI painting — 0.5 CPU, 512 MB RAM, 1 GPU ≥ 4000 MB" in page
    assert "bookings.css" in page


def test_the_check_lists_each_date_with_the_conflict_and_an_alternative(
    owner, course, profile, pool
):
    second = next_monday() + timedelta(weeks=1)
    hold(owner, profile, second, 8)
    answer = signed(owner).post("/courses/cs101/book/", form(profile))
    assert answer.status_code == 200
    page = answer.content.decode()
    assert page.count('class="fits"') == 3 and page.count('class="conflict"') == 1
    assert "leave room for 2 of 5 seats" in page
    assert "Book 2 seats instead." in page
    assert "Confirm without the conflicting dates" in page
    assert BookingSeries.objects.count() == 1  # only the one made above

    # Confirm refuses while a date does not fit; confirming without it books the rest.
    signed(owner).post("/courses/cs101/book/", form(profile, step="confirm"))
    assert BookingSeries.objects.count() == 1
    answer = signed(owner).post("/courses/cs101/book/", form(profile, step="confirm_rest"))
    assert answer.status_code == 302 and "/courses/cs101/calendar/?week=" in answer["Location"]
    made = BookingSeries.objects.latest("pk")
    assert made.bookings.count() == 3 and made.skip_dates == [second.isoformat()]


def test_confirm_books_every_date_when_all_fit(owner, course, profile, pool):
    answer = signed(owner).post(
        "/courses/cs101/book/", form(profile, step="confirm", skip_dates=" 2099-01-05 ,\n")
    )
    assert answer.status_code == 302
    made = BookingSeries.objects.get()
    assert made.bookings.count() == 4 and made.weekly
    assert AuditEvent.objects.filter(kind=AuditKind.BOOKING_SERIES_CREATED).count() == 1


def test_errors_stand_next_to_the_field_at_fault_and_nothing_is_booked(
    owner, course, profile, pool
):
    answer = signed(owner).post("/courses/cs101/book/", form(profile, ends="08:00"))
    assert answer.status_code == 400
    page = answer.content.decode()
    assert "The end time must be after the start time." in page
    assert 'id="id_ends_error"' in page or 'aria-invalid="true"' in page
    answer = signed(owner).post("/courses/cs101/book/", form(profile, skip_dates="soon"))
    assert answer.status_code == 400 and "is not a date" in answer.content.decode()
    answer = signed(owner).post("/courses/cs101/book/", form(profile, seats=11, step="confirm"))
    assert answer.status_code == 200 and "The pool has 10 slices" in answer.content.decode()
    assert not Booking.objects.exists()


def test_the_calendar_shows_the_week_for_instructors_and_tas_not_students(
    owner, stranger, ta, course, profile, pool
):
    booking = hold(owner, profile, next_monday(), 4)
    week = f"/courses/cs101/calendar/?week={next_monday().isoformat()}"
    page = signed(owner).get(week).content.decode()
    assert page.count('<li class="day') == 7
    assert "4 seats · AI painting" in page and "09:00" in page
    assert f"/courses/cs101/bookings/{booking.pk}/edit/" in page
    assert f"?week={(next_monday() + timedelta(days=7)).isoformat()}" in page
    ta_page = signed(ta).get(week).content.decode()
    assert "4 seats · AI painting" in ta_page and "/edit/" not in ta_page
    assert signed(stranger).get(week).status_code == 404
    # Another week has none of it; a bad week falls back to this one.
    assert "4 seats" not in signed(owner).get("/courses/cs101/calendar/").content.decode()
    assert signed(owner).get("/courses/cs101/calendar/?week=junk").status_code == 200


def test_times_show_in_the_viewers_time_zone(owner, course, profile, pool):
    hold(owner, profile, next_monday(), 4)  # 09:00–11:00 UTC
    Member.objects.update_or_create(user=owner, defaults={"time_zone": "Asia/Shanghai"})
    page = signed(owner).get(f"/courses/cs101/calendar/?week={next_monday().isoformat()}")
    assert "17:00" in page.content.decode()


def test_change_and_cancel_a_booking_and_a_series(owner, ta, course, profile, pool):
    booking = hold(owner, profile, next_monday(), 4)
    url = f"/courses/cs101/bookings/{booking.pk}/edit/"
    assert signed(ta).get(url).status_code == 404
    values = {
        "profile": profile.pk,
        "seats": 6,
        "day": next_monday().isoformat(),
        "starts": "10:00",
        "ends": "12:00",
    }
    assert signed(owner).post(url, {**values, "seats": 11}).status_code == 400
    assert signed(owner).post(url, values).status_code == 302
    booking.refresh_from_db()
    assert booking.seats == 6 and booking.starts_at == datetime.combine(
        next_monday(), time(10), tzinfo=UTC
    )
    assert AuditEvent.objects.filter(kind=AuditKind.BOOKING_CHANGED).exists()
    assert signed(ta).post(f"/courses/cs101/bookings/{booking.pk}/cancel/").status_code == 404
    assert signed(owner).post(f"/courses/cs101/bookings/{booking.pk}/cancel/").status_code == 302
    booking.refresh_from_db()
    assert booking.cancelled_at is not None
    signed(owner).post("/courses/cs101/book/", form(profile, step="confirm", seats=2))
    series = BookingSeries.objects.latest("pk")
    cancel = signed(owner).post(f"/courses/cs101/series/{series.pk}/cancel/", {"confirmed": "1"})
    assert cancel.status_code == 302
    assert not series.bookings.filter(cancelled_at=None).exists()


def api(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def test_the_series_api_checks_creates_lists_and_cancels(owner, stranger, course, profile, pool):
    second = next_monday() + timedelta(weeks=1)
    hold(owner, profile, second, 8)
    first = next_monday()
    body = {
        "course": "cs101",
        "profile": profile.pk,
        "seats": 5,
        "weekly": True,
        "first_date": first.isoformat(),
        "last_date": (first + timedelta(weeks=3)).isoformat(),
        "starts": "09:00",
        "ends": "11:00",
    }
    check = api(owner).post("/api/v1/booking-series/check/", body, format="json")
    assert check.status_code == 200, check.content
    data = check.json()
    assert not data["fits"] and data["conflicts"] == 1
    [caution] = data["cautions"]  # the week held by the booking above
    assert "already has a booking at overlapping times" in caution
    [conflict] = [d for d in data["dates"] if not d["fits"]]
    assert conflict["date"] == second.isoformat() and conflict["most_seats"] == 2
    assert {a["kind"] for a in conflict["alternatives"]} >= {"seats", "time"}
    assert api(owner).post("/api/v1/booking-series/", body, format="json").status_code == 409
    refused = api(stranger).post("/api/v1/booking-series/check/", body, format="json")
    assert refused.status_code == 400 and "course" in refused.json()
    bad = api(owner).post("/api/v1/booking-series/check/", {**body, "ends": "08:00"}, format="json")
    assert bad.status_code == 400 and "ends" in bad.json()
    made = api(owner).post(
        "/api/v1/booking-series/", {**body, "without_conflicts": True}, format="json"
    )
    assert made.status_code == 201, made.content
    assert len(made.json()["bookings"]) == 3
    listed = api(owner).get("/api/v1/booking-series/").json()
    assert made.json()["id"] in [s["id"] for s in listed]
    cancelled = api(owner).post(f"/api/v1/booking-series/{made.json()['id']}/cancel/")
    assert cancelled.status_code == 200 and cancelled.json()["cancelled_at"]


def test_the_bookings_api_changes_a_booking_checked(owner, course, profile, pool):
    booking = hold(owner, profile, next_monday(), 4)
    client = api(owner)
    assert (
        client.patch(f"/api/v1/bookings/{booking.pk}/", {"seats": 11}, format="json").status_code
        == 400
    )
    changed = client.patch(f"/api/v1/bookings/{booking.pk}/", {"seats": 7}, format="json")
    assert changed.status_code == 200 and changed.json()["seats"] == 7


def test_a_second_booking_at_the_same_times_and_seats_beyond_the_roster_are_confirmed_knowingly(
    owner, course, profile, pool
):
    """The walk (issue 38): three identical weekly bookings were each accepted with "All 5
    dates fit". Now the check says what looks like a mistake, and only a ticked "Book anyway"
    books it."""
    first = next_monday()
    hold(owner, profile, first, 2)
    client = signed(owner)
    check = client.post("/courses/cs101/book/", form(profile, seats=13))
    page = check.content.decode()
    assert check.status_code == 200 and 'id="booking-cautions"' in page
    assert "already has a booking at overlapping times on" in page
    assert "13 seats is more than the 12 students on the roster of cs101." in page
    assert 'name="accept_cautions"' in page
    refused = client.post("/courses/cs101/book/", form(profile, seats=13, step="confirm"))
    assert refused.status_code == 400
    assert "tick “Book anyway”" in refused.content.decode()
    assert Booking.objects.count() == 1  # only the first
    booked = client.post(
        "/courses/cs101/book/", form(profile, seats=2, step="confirm", accept_cautions="on")
    )
    assert booked.status_code == 302 and Booking.objects.count() == 5
    # A booking that overlaps nothing and fits the roster asks nothing more.
    later = form(profile, starts="14:00", ends="15:00", step="confirm")
    assert client.post("/courses/cs101/book/", later).status_code == 302
