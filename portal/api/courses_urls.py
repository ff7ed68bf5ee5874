"""API URLs of the courses resources."""

from __future__ import annotations

from django.urls import URLPattern

urlpatterns: list[URLPattern] = []
