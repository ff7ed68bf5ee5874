"""API URLs of the courses resources."""

from __future__ import annotations

from django.urls import URLPattern, path

from . import courses

urlpatterns: list[URLPattern] = [
    path("courses/", courses.CourseListView.as_view(), name="api-courses"),
    path("courses/<slug:code>/", courses.CourseDetailView.as_view(), name="api-course"),
    path("courses/<slug:code>/roster/", courses.RosterView.as_view(), name="api-course-roster"),
    path("courses/<slug:code>/tas/", courses.TaView.as_view(), name="api-course-tas"),
    path(
        "courses/<slug:code>/start-all/",
        courses.StartAllView.as_view(),
        name="api-course-start-all",
    ),
    path(
        "courses/<slug:code>/stop-all/", courses.StopAllView.as_view(), name="api-course-stop-all"
    ),
    path("courses/<slug:code>/class/", courses.ClassView.as_view(), name="api-course-class"),
]
