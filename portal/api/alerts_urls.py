"""API URLs of alerts and alert rules (portal/api/alerts.py), admins only."""

from __future__ import annotations

from . import alerts
from .routers import IdRouter

# A SimpleRouter (digit ids: portal/api/routers.py): the API root view stays the main
# router's (portal/api/urls.py).
router = IdRouter()
router.register("alerts", alerts.AlertViewSet, basename="api-alert")
router.register("alert-rules", alerts.AlertRuleViewSet, basename="api-alert-rule")

urlpatterns = router.urls
