"""The admin console (``/console/``): one URL module per group of pages."""

from __future__ import annotations

from django.urls import include, path

from . import console_views

urlpatterns = [
    path("", console_views.overview, name="console"),
    path("", include("portal.console_pool_urls")),
    path("", include("portal.console_queue_urls")),
    path("", include("portal.console_ops_urls")),
]
