"""The account's API tokens page (portal/token_views.py), under ``/account/tokens/``."""

from __future__ import annotations

from django.urls import URLPattern, path

from . import token_views

urlpatterns: list[URLPattern] = [
    path("", token_views.api_tokens, name="account-tokens"),
    path("<int:token_id>/revoke/", token_views.revoke_api_token, name="account-token-revoke"),
]
