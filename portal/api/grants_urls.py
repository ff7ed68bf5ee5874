"""API URLs of the grants resources (portal/api/grants.py)."""

from __future__ import annotations

from django.urls import path

from . import grants
from .routers import IdRouter

# A SimpleRouter (digit ids: portal/api/routers.py): the API root view stays the main
# router's (portal/api/urls.py).
router = IdRouter()
router.register("thesis-grants", grants.ThesisGrantViewSet, basename="api-thesis-grant")
router.register("quota-requests", grants.QuotaRequestViewSet, basename="api-quota-request")

urlpatterns = [
    path("me/quota/", grants.MyQuotaView.as_view(), name="api-my-quota"),
    *router.urls,
]
