from django.urls import include, path

from .routers import IdDefaultRouter
from .tokens import ObtainTokenView, TokenDetailView, TokenListView
from .views import DesktopProfileViewSet, PoolView, SessionViewSet

router = IdDefaultRouter()
router.register("profiles", DesktopProfileViewSet, basename="profile")
router.register("sessions", SessionViewSet, basename="session")

urlpatterns = [
    path("auth/token/", ObtainTokenView.as_view(), name="api-token"),
    path("auth/tokens/", TokenListView.as_view(), name="api-tokens"),
    path("auth/tokens/<int:token_id>/", TokenDetailView.as_view(), name="api-token-detail"),
    path("pool/", PoolView.as_view(), name="api-pool"),
    path("", include("portal.api.courses_urls")),
    path("", include("portal.api.bookings_urls")),
    path("", include("portal.api.grants_urls")),
    path("", include("portal.api.usage_urls")),
    path("", include("portal.api.alerts_urls")),
    path("", include(router.urls)),
]
