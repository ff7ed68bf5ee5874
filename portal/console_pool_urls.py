"""Console page URLs: the pool pages (portal/console_pool_views.py)."""

from __future__ import annotations

from django.urls import URLPattern, path

from . import console_pool_views as views

urlpatterns: list[URLPattern] = [
    path("pool/", views.pool, name="console-pool"),
    path("pool/fragment/", views.pool_fragment, name="console-pool-fragment"),
    path("pool/nodes/", views.node_action, name="console-pool-node-action"),
    path("pool/tokens/", views.create_token, name="console-pool-token-create"),
    path(
        "pool/tokens/<int:token_id>/revoke/",
        views.revoke_token,
        name="console-pool-token-revoke",
    ),
]
