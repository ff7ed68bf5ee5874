"""The portal's URLs: one include per face (docs/architecture.md, "Faces")."""

from django.conf import settings
from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView

from portal.server import metrics

# Overload raised outside a view (the database pool exhausted) is a 503 too: portal.server.overload.
handler500 = "portal.server.overload.server_error"
# Under /api/, a path that matches no route is a JSON 404 like the API's other errors.
handler404 = "portal.server.input_limits.not_found"

urlpatterns = [
    path("", include("portal.student.urls")),
    path("account/", include("portal.account.urls")),
    path("", include("portal.teaching.urls")),
    path("console/", include("portal.console.urls")),
    path("i18n/", include("django.conf.urls.i18n")),
    path(
        "login/",
        auth_views.LoginView.as_view(extra_context={"signin_backends": settings.SIGNIN_BACKENDS}),
        name="login",
    ),
    # logout/ (ending the identity provider's session too) and the campus backends' URLs
    path("", include("portal.signin.urls")),
    path("admin/", admin.site.urls),
    path("api/v1/", include("portal.api.urls")),
    path("api/agent/v1/", include("portal.agents.api")),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    # Exactly /metrics, as Prometheus asks for it (no slash, no redirect).
    path("metrics", metrics.metrics, name="metrics"),
]
