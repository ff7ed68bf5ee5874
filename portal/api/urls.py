from django.urls import include, path
from rest_framework.authtoken.views import obtain_auth_token
from rest_framework.routers import DefaultRouter

from .views import DesktopProfileViewSet, PoolView, SessionViewSet

router = DefaultRouter()
router.register("profiles", DesktopProfileViewSet, basename="profile")
router.register("sessions", SessionViewSet, basename="session")

urlpatterns = [
    path("auth/token/", obtain_auth_token, name="api-token"),
    path("pool/", PoolView.as_view(), name="api-pool"),
    path("", include("portal.api.courses_urls")),
    path("", include("portal.api.bookings_urls")),
    path("", include("portal.api.grants_urls")),
    path("", include("portal.api.usage_urls")),
    path("", include("portal.api.alerts_urls")),
    path("", include(router.urls)),
]
