"""Page URLs of the grant pages (portal/grant_views.py)."""

from __future__ import annotations

from django.urls import URLPattern, path

from . import grant_views

urlpatterns: list[URLPattern] = [
    path("thesis/", grant_views.thesis_grants, name="thesis-grants"),
    path("thesis/<int:grant_id>/revoke/", grant_views.revoke_grant, name="thesis-grant-revoke"),
    path("quota-requests/", grant_views.quota_requests, name="quota-requests"),
    path(
        "quota-requests/<int:request_id>/answer/",
        grant_views.answer_quota_request,
        name="quota-request-answer",
    ),
]
