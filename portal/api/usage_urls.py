"""API URLs of accounting (portal/api/usage.py): usage records, the report, the price list."""

from __future__ import annotations

from django.urls import path

from . import usage
from .routers import IdRouter

# A SimpleRouter (digit ids: portal/api/routers.py): the API root view stays the main
# router's (portal/api/urls.py).
router = IdRouter()
router.register("usage/records", usage.UsageRecordViewSet, basename="api-usage-record")
router.register("prices", usage.PriceRuleViewSet, basename="api-price")

urlpatterns = [
    path("usage/report/", usage.UsageReportView.as_view(), name="api-usage-report"),
    *router.urls,
]
