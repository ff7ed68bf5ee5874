"""Console page URLs: the queue, quota and desktop profile pages (portal/console_queue_views.py)."""

from __future__ import annotations

from django.urls import URLPattern, path

from . import console_queue_views as views

urlpatterns: list[URLPattern] = [
    path("queue/", views.queue, name="console-queue"),
    path("queue/fragment/", views.queue_fragment, name="console-queue-fragment"),
    path("queue/<int:session_id>/cancel/", views.queue_cancel, name="console-queue-cancel"),
    path("queue/<int:session_id>/boost/", views.queue_boost, name="console-queue-boost"),
    path("quotas/", views.quotas, name="console-quotas"),
    path("quotas/<int:quota_id>/", views.quota_edit, name="console-quota-edit"),
    path("quotas/<int:quota_id>/delete/", views.quota_delete, name="console-quota-delete"),
    path("profiles/", views.profiles, name="console-profiles"),
    path("profiles/<int:profile_id>/", views.profile_edit, name="console-profile-edit"),
    path(
        "profiles/<int:profile_id>/deactivate/",
        views.profile_deactivate,
        name="console-profile-deactivate",
    ),
]
