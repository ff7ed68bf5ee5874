"""Page URLs of the course pages (portal/course_views.py)."""

from __future__ import annotations

from django.urls import URLPattern, path

from . import course_views as views

urlpatterns: list[URLPattern] = [
    path("", views.index, name="courses"),
    path("<slug:code>/", views.detail, name="course-detail"),
    path("<slug:code>/roster/import/", views.roster_import, name="course-roster-import"),
    path("<slug:code>/roster/add/", views.roster_add, name="course-roster-add"),
    path(
        "<slug:code>/roster/<int:user_id>/remove/",
        views.roster_remove,
        name="course-roster-remove",
    ),
    path("<slug:code>/tas/", views.ta_save, name="course-ta-save"),
    path("<slug:code>/tas/<int:user_id>/remove/", views.ta_remove, name="course-ta-remove"),
    path("<slug:code>/settings/", views.course_settings, name="course-settings"),
    path("<slug:code>/start-all/", views.start_all, name="course-start-all"),
    path("<slug:code>/stop-all/", views.stop_all, name="course-stop-all"),
    path(
        "<slug:code>/sessions/<int:session_id>/stop/",
        views.stop_session,
        name="course-stop-session",
    ),
]
