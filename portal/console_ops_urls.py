"""Console page URLs: the ops pages (portal/console_ops_views.py)."""

from __future__ import annotations

from django.urls import URLPattern, path

from . import console_ops_views as views

urlpatterns: list[URLPattern] = [
    path("alerts/", views.alerts, name="console-alerts"),
    path("alerts/fragment/", views.alerts_fragment, name="console-alerts-fragment"),
    path(
        "alerts/<int:alert_id>/acknowledge/",
        views.alert_acknowledge,
        name="console-alert-acknowledge",
    ),
    path("alerts/<int:alert_id>/resolve/", views.alert_resolve, name="console-alert-resolve"),
    path("alerts/rules/new/", views.alert_rule, name="console-alert-rule-new"),
    path("alerts/rules/<int:rule_id>/", views.alert_rule, name="console-alert-rule"),
    path("reports/", views.reports, name="console-reports"),
    path("audit/", views.audit, name="console-audit"),
]
