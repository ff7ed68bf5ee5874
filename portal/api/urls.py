"""The user API's URLs (``/api/v1/``), every resource of portal/api/.

Detail routes take ASCII digits only (portal/api/routers.py). One DefaultRouter gives the API
root view; the resources registered on the SimpleRouter below do not appear in it, as before.
Their basenames start with "api-" so that the pages' URL names (booking-cancel...) stay theirs.
"""

from django.urls import include, path

from portal.api import alerts, bookings, courses, grants, usage
from portal.api.routers import IdDefaultRouter, IdRouter
from portal.api.tokens import ObtainTokenView, TokenDetailView, TokenListView
from portal.api.views import DesktopProfileViewSet, PoolView, SessionViewSet

router = IdDefaultRouter()
router.register("profiles", DesktopProfileViewSet, basename="profile")
router.register("sessions", SessionViewSet, basename="session")

resources = IdRouter()
resources.register("bookings", bookings.BookingViewSet, basename="api-booking")
resources.register("booking-series", bookings.BookingSeriesViewSet, basename="api-booking-series")
resources.register("thesis-grants", grants.ThesisGrantViewSet, basename="api-thesis-grant")
resources.register("quota-requests", grants.QuotaRequestViewSet, basename="api-quota-request")
resources.register("usage/records", usage.UsageRecordViewSet, basename="api-usage-record")
resources.register("prices", usage.PriceRuleViewSet, basename="api-price")
resources.register("alerts", alerts.AlertViewSet, basename="api-alert")
resources.register("alert-rules", alerts.AlertRuleViewSet, basename="api-alert-rule")

COURSE = "courses/<slug:code>/"

urlpatterns = [
    path("auth/token/", ObtainTokenView.as_view(), name="api-token"),
    path("auth/tokens/", TokenListView.as_view(), name="api-tokens"),
    path("auth/tokens/<int:token_id>/", TokenDetailView.as_view(), name="api-token-detail"),
    path("pool/", PoolView.as_view(), name="api-pool"),
    path("courses/", courses.CourseListView.as_view(), name="api-courses"),
    path(COURSE, courses.CourseDetailView.as_view(), name="api-course"),
    path(f"{COURSE}roster/", courses.RosterView.as_view(), name="api-course-roster"),
    path(f"{COURSE}tas/", courses.TaView.as_view(), name="api-course-tas"),
    path(f"{COURSE}start-all/", courses.StartAllView.as_view(), name="api-course-start-all"),
    path(f"{COURSE}stop-all/", courses.StopAllView.as_view(), name="api-course-stop-all"),
    path(f"{COURSE}class/", courses.ClassView.as_view(), name="api-course-class"),
    path("me/quota/", grants.MyQuotaView.as_view(), name="api-my-quota"),
    path("usage/report/", usage.UsageReportView.as_view(), name="api-usage-report"),
    *resources.urls,
    path("", include(router.urls)),
]
