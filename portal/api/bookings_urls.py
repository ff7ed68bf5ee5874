"""API URLs of the bookings resources (portal/api/bookings.py)."""

from __future__ import annotations

from . import bookings
from .routers import IdRouter

# A SimpleRouter (digit ids: portal/api/routers.py): the API root view stays the main
# router's (portal/api/urls.py). The basenames start with "api-" so that the pages' URL
# names (booking-cancel...) stay theirs.
router = IdRouter()
router.register("bookings", bookings.BookingViewSet, basename="api-booking")
router.register("booking-series", bookings.BookingSeriesViewSet, basename="api-booking-series")

urlpatterns = router.urls
