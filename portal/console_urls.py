"""The admin console (``/console/``): one URL module per group of pages."""

from __future__ import annotations

from django.urls import include, path

from . import console_lifecycle_views, console_views

urlpatterns = [
    path("", console_views.overview, name="console"),
    path("idle/", console_lifecycle_views.idle, name="console-idle"),
    path("idle/hours/", console_lifecycle_views.hours, name="console-idle-hours"),
    path("idle/policies/", console_lifecycle_views.policies, name="console-idle-policies"),
    path(
        "idle/policies/<int:policy_id>/",
        console_lifecycle_views.policy_edit,
        name="console-idle-policy-edit",
    ),
    path(
        "idle/policies/<int:policy_id>/delete/",
        console_lifecycle_views.policy_delete,
        name="console-idle-policy-delete",
    ),
    path("", include("portal.console_pool_urls")),
    path("", include("portal.console_queue_urls")),
    path("", include("portal.console_ops_urls")),
]
