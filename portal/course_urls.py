"""Page URLs of the course pages (portal/course_views.py)."""

from __future__ import annotations

from django.urls import URLPattern

urlpatterns: list[URLPattern] = []
