"""Changes made in the Django admin go through the services: bookings through check_booking,
do_create_booking and do_cancel_booking (with the warm pool's clean-up), policy and quota
edits through do_save_audited."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from people.models import Course
from scheduling.choices import AuditKind
from scheduling.models import Allocation, AuditEvent, Booking, PoolPolicy, WarmDesktop
from scheduling.services import Conflict

pytestmark = pytest.mark.django_db

FORMAT = "%Y-%m-%d"


@pytest.fixture
def admin_client(admin_user) -> Client:
    client = Client()
    client.force_login(admin_user)
    return client


@pytest.fixture
def course(db):
    return Course.objects.create(code="cs101", title="Intro", department="cs")


def booking_form(course, profile, seats: int, starts_in: timedelta) -> dict:
    start = timezone.localtime(timezone.now() + starts_in)
    end = start + timedelta(hours=2)
    return {
        "course": course.pk,
        "profile": profile.pk,
        "seats": seats,
        "starts_at_0": start.strftime(FORMAT),
        "starts_at_1": start.strftime("%H:%M:%S"),
        "ends_at_0": end.strftime(FORMAT),
        "ends_at_1": end.strftime("%H:%M:%S"),
    }


def test_a_booking_added_in_the_admin_is_checked_like_any_other(
    admin_client, course, profile, pool
):
    url = "/admin/scheduling/booking/add/"
    too_many = admin_client.post(url, booking_form(course, profile, 50, timedelta(days=1)))
    assert too_many.status_code == 200  # the form again, with the service's message
    assert "slices that fit" in too_many.content.decode()
    in_the_past = admin_client.post(url, booking_form(course, profile, 2, -timedelta(days=1)))
    assert "starts in the past" in in_the_past.content.decode()
    assert not Booking.objects.exists()

    made = admin_client.post(url, booking_form(course, profile, 2, timedelta(days=1)))
    assert made.status_code == 302
    booking = Booking.objects.get()
    assert booking.seats == 2
    assert AuditEvent.objects.filter(kind=AuditKind.BOOKING_CREATED).count() == 1


def test_a_booking_that_stops_fitting_between_check_and_save_is_refused_not_a_500(
    admin_client, course, profile, pool, monkeypatch
):
    """Another booking took the seats after the form's check: the admin says so and saves
    nothing (do_create_booking checks again under the lock and raises Conflict)."""

    def taken(user, request):
        raise Conflict("The pool no longer holds these seats; check again.")

    monkeypatch.setattr("portal.admin.scheduling.do_create_booking", taken)
    url = "/admin/scheduling/booking/add/"
    answer = admin_client.post(url, booking_form(course, profile, 2, timedelta(days=1)))
    assert answer.status_code == 302 and answer.url.endswith(url)
    assert "no longer holds" in admin_client.get(answer.url).content.decode()
    assert not Booking.objects.exists()


def test_cancelling_in_the_admin_drops_the_warm_desktops_and_their_holds(
    admin_client, course, profile, pool
):
    start = timezone.now() + timedelta(minutes=2)
    booking = Booking.objects.create(
        course=course, profile=profile, seats=1, starts_at=start, ends_at=start + timedelta(hours=1)
    )
    warm = WarmDesktop.objects.create(booking=booking, node=pool, key="b1-cafe0000")
    slice_ = pool.gpus.first().slices.first()
    Allocation.objects.create(warm=warm, node=pool, slice=slice_)

    answer = admin_client.post(
        "/admin/scheduling/booking/",
        {"action": "cancel", "_selected_action": [booking.pk]},
    )
    assert answer.status_code == 302
    booking.refresh_from_db()
    assert booking.cancelled_at is not None
    assert not WarmDesktop.objects.exists()
    assert not Allocation.objects.filter(slice=slice_, released_at=None).exists()
    assert AuditEvent.objects.filter(kind=AuditKind.BOOKING_CANCELLED).count() == 1
    # Saved bookings are not edited or deleted there.
    page = admin_client.get(f"/admin/scheduling/booking/{booking.pk}/change/").content.decode()
    assert 'name="seats"' not in page
    assert admin_client.get(f"/admin/scheduling/booking/{booking.pk}/delete/").status_code == 403


def test_a_policy_edit_in_the_admin_is_audited(admin_client):
    policy = PoolPolicy.current()
    fields = {
        "temperature_limit_c": 85.0,
        "protected_minutes": 20,
        "grace_minutes": 7,
        "aging_minutes_per_gpu_hour": 15.0,
        "usage_half_life_days": 7.0,
        "booking_hold_hours": 24.0,
        "max_granted_gpu_hours_week": 100.0,
    }
    url = f"/admin/scheduling/poolpolicy/{policy.pk}/change/"
    # The admission threshold is the "Pool usage" alert rule's, edited in the console only.
    page = admin_client.get(url).content.decode()
    assert 'name="warn_percent"' not in page and 'name="block_percent"' not in page
    answer = admin_client.post(url, fields)
    assert answer.status_code == 302
    policy.refresh_from_db()
    assert (policy.protected_minutes, policy.grace_minutes) == (20, 7)
    [event] = AuditEvent.objects.filter(kind=AuditKind.POLICY_CHANGED)
    assert event.data["changed"] == {"protected_minutes": "20", "grace_minutes": "7"}


def test_join_tokens_are_not_made_in_the_admin(admin_client):
    # Only create_join_token makes them: it shows the plain token once and audits it.
    assert admin_client.get("/admin/scheduling/jointoken/add/").status_code == 403


def test_a_desktop_profile_edit_in_the_admin_is_audited(admin_client, profile):
    page = admin_client.get(f"/admin/scheduling/desktopprofile/{profile.pk}/change/")
    form = page.context["adminform"].form
    data = {name: form[name].value() for name in form.fields}
    data.update(max_duration_minutes=90, gpu_models="[]", allowed_kinds='["mig", "share"]')
    data = {k: v for k, v in data.items() if v is not None}
    answer = admin_client.post(f"/admin/scheduling/desktopprofile/{profile.pk}/change/", data)
    assert answer.status_code == 302, answer.content.decode()[:2000]
    profile.refresh_from_db()
    assert profile.max_duration_minutes == 90
    [event] = AuditEvent.objects.filter(kind=AuditKind.POLICY_CHANGED)
    assert event.data["model"] == "desktopprofile"
    assert event.data["changed"]["max_duration_minutes"] == "90"
