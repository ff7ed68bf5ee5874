"""The account face's URLs, under ``/account/``: the account page, notices, API tokens."""

from __future__ import annotations

from django.urls import URLPattern, path

from portal.account import tokens, views

urlpatterns: list[URLPattern] = [
    path("", views.account, name="account"),
    path("notices/", views.account_notices, name="account-notices"),
    path("tokens/", tokens.api_tokens, name="account-tokens"),
    path("tokens/<int:token_id>/revoke/", tokens.revoke_api_token, name="account-token-revoke"),
]
