"""API URLs of the bookings resources (portal/api/bookings.py)."""

from __future__ import annotations

from rest_framework.routers import SimpleRouter

from . import bookings

# A SimpleRouter: the API root view stays the main router's (portal/api/urls.py). The
# basenames start with "api-" so that the pages' URL names (booking-cancel...) stay theirs.
router = SimpleRouter()
router.register("bookings", bookings.BookingViewSet, basename="api-booking")
router.register("booking-series", bookings.BookingSeriesViewSet, basename="api-booking-series")

urlpatterns = router.urls
