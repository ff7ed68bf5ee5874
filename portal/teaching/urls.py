"""The teaching face's page URLs: courses (roster, TAs, settings, the live class), a course's
lab bookings, thesis grants and quota requests."""

from __future__ import annotations

from django.urls import URLPattern, path

from portal.teaching import bookings, course_files, courses, grants

COURSE = "courses/<slug:code>/"

urlpatterns: list[URLPattern] = [
    path("courses/", courses.index, name="courses"),
    path(COURSE, courses.detail, name="course-detail"),
    path(f"{COURSE}roster/import/", courses.roster_import, name="course-roster-import"),
    path(f"{COURSE}roster/add/", courses.roster_add, name="course-roster-add"),
    path(
        f"{COURSE}roster/<int:user_id>/remove/", courses.roster_remove, name="course-roster-remove"
    ),
    path(f"{COURSE}tas/", courses.ta_save, name="course-ta-save"),
    path(f"{COURSE}tas/<int:user_id>/remove/", courses.ta_remove, name="course-ta-remove"),
    path(f"{COURSE}settings/", courses.course_settings, name="course-settings"),
    path(f"{COURSE}start-all/", courses.start_all, name="course-start-all"),
    path(f"{COURSE}stop-all/", courses.stop_all, name="course-stop-all"),
    path(
        f"{COURSE}sessions/<int:session_id>/stop/",
        courses.stop_session,
        name="course-stop-session",
    ),
    # the course folder (docs/course-files.md)
    path(f"{COURSE}files/upload/", course_files.upload, name="course-files-upload"),
    path(f"{COURSE}files/<int:file_id>/delete/", course_files.delete, name="course-files-delete"),
    # a course's lab bookings
    path(f"{COURSE}book/", bookings.book, name="booking-new"),
    path(f"{COURSE}calendar/", bookings.calendar, name="booking-calendar"),
    path(f"{COURSE}bookings/<int:booking_id>/edit/", bookings.edit, name="booking-edit"),
    path(f"{COURSE}bookings/<int:booking_id>/cancel/", bookings.cancel, name="booking-cancel"),
    path(f"{COURSE}series/<int:series_id>/cancel/", bookings.cancel_series, name="series-cancel"),
    # thesis grants and quota requests
    path("thesis/", grants.thesis_grants, name="thesis-grants"),
    path("thesis/<int:grant_id>/revoke/", grants.revoke_grant, name="thesis-grant-revoke"),
    path("quota-requests/", grants.quota_requests, name="quota-requests"),
    path(
        "quota-requests/<int:request_id>/answer/",
        grants.answer_quota_request,
        name="quota-request-answer",
    ),
]
