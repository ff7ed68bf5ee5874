"""Page URLs of the booking pages (portal/booking_views.py), under ``courses/<code>/``."""

from __future__ import annotations

from django.urls import URLPattern, path

from . import booking_views

urlpatterns: list[URLPattern] = [
    path("book/", booking_views.book, name="booking-new"),
    path("calendar/", booking_views.calendar, name="booking-calendar"),
    path("bookings/<int:booking_id>/edit/", booking_views.edit, name="booking-edit"),
    path("bookings/<int:booking_id>/cancel/", booking_views.cancel, name="booking-cancel"),
    path("series/<int:series_id>/cancel/", booking_views.cancel_series, name="series-cancel"),
]
