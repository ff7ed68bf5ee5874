"""Class bookings and the warm desktops started ahead for them."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.conf import settings
from django.db import models
from django.utils import timezone

from people.models import Course

if TYPE_CHECKING:
    from django.contrib.auth.models import AnonymousUser, User

    from .pool import DesktopProfile, Slice


class CourseDesktop(models.Model):
    """The desktop a course's students are offered first and Start all asks for (its default
    profile; none without a row). Kept here rather than on Course so that model links point
    one way, from scheduling down to people."""

    course = models.OneToOneField(
        "portal.Course", primary_key=True, related_name="default_desktop", on_delete=models.CASCADE
    )
    profile = models.ForeignKey("DesktopProfile", related_name="+", on_delete=models.CASCADE)

    def __str__(self) -> str:
        return f"{self.course_id}: {self.profile_id}"


def default_profile_of(course: Course) -> DesktopProfile | None:
    """The course's default profile, or None (one query unless ``select_related`` with
    ``default_desktop__profile``)."""
    try:
        return course.default_desktop.profile  # type: ignore[attr-defined]
    except CourseDesktop.DoesNotExist:
        return None


def set_default_profile(course: Course, profile: DesktopProfile | None) -> None:
    """Make ``profile`` the course's default (None: no default); ``course`` reads it after."""
    if profile is None:
        CourseDesktop.objects.filter(course=course).delete()
        course._state.fields_cache.pop("default_desktop", None)
        return
    choice, _ = CourseDesktop.objects.update_or_create(course=course, defaults={"profile": profile})
    course.default_desktop = choice  # type: ignore[attr-defined]


class BookingQuerySet(models.QuerySet["Booking"]):
    def visible_to(self, user: User | AnonymousUser) -> BookingQuerySet:
        """Bookings of the courses this user may read (``Course.objects.visible_to``)."""
        return self.filter(course__in=Course.objects.visible_to(user))


class BookingSeries(models.Model):
    """A booking made once or weekly over a date range (a term), with dates to skip: one
    :class:`Booking` row per date it holds. Times of day are in ``time_zone``."""

    course = models.ForeignKey(
        "portal.Course", related_name="booking_series", on_delete=models.CASCADE
    )
    profile = models.ForeignKey("DesktopProfile", on_delete=models.PROTECT)
    seats = models.PositiveIntegerField()
    first_date = models.DateField()
    last_date = models.DateField(help_text="The same as first_date for a booking made once.")
    weekly = models.BooleanField(default=False)
    starts = models.TimeField(help_text="Time of day the window opens, in time_zone.")
    ends = models.TimeField(help_text="Time of day the window closes, in time_zone.")
    time_zone = models.CharField(max_length=64)
    skip_dates = models.JSONField(default=list, blank=True, help_text="ISO dates not held.")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    cancelled_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["first_date", "starts", "pk"]
        verbose_name_plural = "booking series"

    def __str__(self) -> str:
        repeat = "weekly" if self.weekly else "once"
        return f"{self.course} x{self.seats} {repeat} from {self.first_date}"


class Booking(models.Model):
    """An instructor's booking: ``seats`` desktops of a profile for a course in a window
    (one date of a :class:`BookingSeries`, or a lone booking made through the API)."""

    series = models.ForeignKey(
        BookingSeries, null=True, blank=True, related_name="bookings", on_delete=models.CASCADE
    )

    course = models.ForeignKey("portal.Course", related_name="bookings", on_delete=models.CASCADE)
    profile = models.ForeignKey("DesktopProfile", on_delete=models.PROTECT)
    seats = models.PositiveIntegerField()
    starts_at = models.DateTimeField()
    ends_at = models.DateTimeField()
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    cancelled_at = models.DateTimeField(null=True, blank=True)

    objects = BookingQuerySet.as_manager()

    class Meta:
        ordering = ["starts_at", "pk"]

    def __str__(self) -> str:
        return f"{self.course} x{self.seats} {self.profile.slug} {self.starts_at:%Y-%m-%d %H:%M}"

    def in_window(self, now=None) -> bool:
        now = now or timezone.now()
        return self.starts_at <= now < self.ends_at


class WarmState(models.TextChoices):
    STARTING = "STARTING", "Starting"  # wanted: the node's agent starts it
    READY = "READY", "Ready"  # answered a VNC handshake: a booked student can claim it
    FAILED = "FAILED", "Failed"  # did not start or died; tried again (new key) at retry_at


class WarmDesktop(models.Model):
    """A desktop started ahead, without a user, for a class booking; its slice (or node, for
    a CPU-only profile) is held by an :class:`Allocation` row linked to it.

    Rows live while the portal wants the desktop: a claim moves the hold to the session (with
    ``Session.warm_key``) and deletes the row; the booking's end or cancellation deletes it
    and, with it, the hold.
    """

    booking = models.ForeignKey(Booking, related_name="warm_desktops", on_delete=models.CASCADE)
    node = models.ForeignKey("Node", related_name="warm_desktops", on_delete=models.CASCADE)
    key = models.CharField(max_length=40, unique=True)
    state = models.CharField(max_length=10, choices=WarmState.choices, default=WarmState.STARTING)
    reason = models.CharField(max_length=300, blank=True)
    port = models.PositiveIntegerField(null=True, blank=True)
    container_id = models.CharField(max_length=100, blank=True)
    failures = models.PositiveIntegerField(default=0)
    retry_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    ready_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["booking_id", "pk"]

    def __str__(self) -> str:
        return f"warm desktop {self.key} ({self.state}) on {self.node}"

    @property
    def held_slice(self) -> Slice | None:
        """The slice its live hold is on (None for a CPU-only desktop, or once claimed)."""
        hold = self.holds.filter(released_at=None).select_related("slice").first()
        return hold.slice if hold is not None else None
