"""API URLs of accounting (portal/api/usage.py): usage records, the report, the price list."""

from __future__ import annotations

from django.urls import path
from rest_framework.routers import SimpleRouter

from . import usage

# A SimpleRouter: the API root view stays the main router's (portal/api/urls.py).
router = SimpleRouter()
router.register("usage/records", usage.UsageRecordViewSet, basename="api-usage-record")
router.register("prices", usage.PriceRuleViewSet, basename="api-price")

urlpatterns = [
    path("usage/report/", usage.UsageReportView.as_view(), name="api-usage-report"),
    *router.urls,
]
