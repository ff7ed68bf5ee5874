from django.conf import settings
from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from django.views.decorators.cache import never_cache
from drf_spectacular.views import SpectacularAPIView

from . import metrics_view, retry_views, student_views, views

# Overload raised outside a view (the database pool exhausted) is a 503 too: portal.overload.
handler500 = "portal.overload.server_error"
# Under /api/, a path that matches no route is a JSON 404 like the API's other errors.
handler404 = "portal.input_limits.not_found"

urlpatterns = [
    path("", student_views.home, name="home"),
    path("sessions/new/", student_views.submit_session, name="session-submit"),
    path("sessions/<int:session_id>/", student_views.session_detail, name="session-page"),
    path(
        "sessions/<int:session_id>/fragment/",
        student_views.session_fragment,
        name="session-fragment",
    ),
    path("sessions/<int:session_id>/stop/", student_views.stop_session, name="session-page-stop"),
    path("sessions/<int:session_id>/cancel/", student_views.cancel_session, name="session-cancel"),
    path("sessions/<int:session_id>/retry/", retry_views.retry_session, name="session-retry"),
    # Not "session-extend"/"session-resume": those are the API's actions (portal.api.urls).
    path(
        "sessions/<int:session_id>/extend/",
        student_views.extend_session,
        name="session-page-extend",
    ),
    path(
        "sessions/<int:session_id>/resume/",
        student_views.resume_session,
        name="session-page-resume",
    ),
    # Never cached (Cache-Control: no-store): the page of a live desktop.
    path("desktop/<int:session_id>/", never_cache(student_views.desktop), name="desktop"),
    path("history/", student_views.history, name="history"),
    path("account/", views.account, name="account"),
    path("account/notices/", views.account_notices, name="account-notices"),
    path("account/tokens/", include("portal.token_urls")),
    path("courses/", include("portal.course_urls")),
    path("console/", include("portal.console_urls")),
    path("courses/<slug:code>/", include("portal.booking_urls")),
    path("", include("portal.grant_urls")),
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
    path("metrics", metrics_view.metrics, name="metrics"),
]
