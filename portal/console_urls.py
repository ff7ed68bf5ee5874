"""The admin console (``/console/``): one URL module per group of pages."""

from __future__ import annotations

from django.urls import include, path

from . import console_lifecycle_views, console_views

urlpatterns = [
    path("", console_views.overview, name="console"),
    path("idle/", console_lifecycle_views.idle, name="console-idle"),
    path("", include("portal.console_pool_urls")),
    path("", include("portal.console_queue_urls")),
    path("", include("portal.console_ops_urls")),
]
