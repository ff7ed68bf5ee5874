"""Console page URLs: the queue pages (portal/console_queue_views.py)."""

from __future__ import annotations

from django.urls import URLPattern

urlpatterns: list[URLPattern] = []
