"""Page URLs of the grant pages (portal/grant_views.py)."""

from __future__ import annotations

from django.urls import URLPattern

urlpatterns: list[URLPattern] = []
