"""Console page URLs: the ops pages (portal/console_ops_views.py)."""

from __future__ import annotations

from django.urls import URLPattern

urlpatterns: list[URLPattern] = []
