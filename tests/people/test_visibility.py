"""Who sees which course and booking: Course.objects.visible_to and Booking.objects.visible_to,
as the bookings API uses them. Three people: a teacher, an enrolled student, a stranger."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from guardian.shortcuts import assign_perm
from rest_framework.test import APIClient

from people.models import Course
from scheduling.models import Booking

pytestmark = pytest.mark.django_db


@pytest.fixture
def course(make_user, owner):
    course = Course.objects.create(code="cs101", title="Intro", department="cs")
    course.instructors.add(make_user("prof"))
    course.students.add(owner)
    Course.objects.create(code="ma201", title="Algebra")
    return course


@pytest.fixture
def booking(course, profile):
    start = timezone.now() + timedelta(days=1)
    return Booking.objects.create(
        course=course, profile=profile, seats=2, starts_at=start, ends_at=start + timedelta(hours=2)
    )


def codes(queryset) -> list[str]:
    return sorted(c.code for c in queryset)


def test_courses_are_visible_to_their_teachers_students_and_admins_only(
    course, owner, stranger, admin_user
):
    prof = course.instructors.get()
    assert codes(Course.objects.visible_to(prof)) == ["cs101"]
    assert codes(Course.objects.visible_to(owner)) == ["cs101"]
    assert codes(Course.objects.visible_to(stranger)) == []
    assert codes(Course.objects.visible_to(admin_user)) == ["cs101", "ma201"]


def test_a_guardian_grant_shows_one_course_to_a_teaching_assistant(course, make_user):
    ta = make_user("tara")
    assign_perm("portal.view_course", ta, course)
    assert codes(Course.objects.visible_to(ta)) == ["cs101"]


def test_the_bookings_api_lists_only_visible_courses_bookings(booking, owner, stranger):
    client = APIClient()
    client.force_authenticate(stranger)
    assert client.get("/api/v1/bookings/").json() == []
    assert client.get(f"/api/v1/bookings/{booking.pk}/").status_code == 404
    client.force_authenticate(owner)
    assert [b["id"] for b in client.get("/api/v1/bookings/").json()] == [booking.pk]
    assert list(Booking.objects.visible_to(stranger)) == []
