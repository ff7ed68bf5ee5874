"""API URLs of alerts and alert rules (portal/api/alerts.py), admins only."""

from __future__ import annotations

from rest_framework.routers import SimpleRouter

from . import alerts

# A SimpleRouter: the API root view stays the main router's (portal/api/urls.py).
router = SimpleRouter()
router.register("alerts", alerts.AlertViewSet, basename="api-alert")
router.register("alert-rules", alerts.AlertRuleViewSet, basename="api-alert-rule")

urlpatterns = router.urls
