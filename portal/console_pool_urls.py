"""Console page URLs: the pool pages (portal/console_pool_views.py)."""

from __future__ import annotations

from django.urls import URLPattern

urlpatterns: list[URLPattern] = []
