"""The student face's URLs: home, a session and its actions, the desktop, history."""

from __future__ import annotations

from django.urls import URLPattern, path
from django.views.decorators.cache import never_cache

from portal.student import retry, views

SESSION = "sessions/<int:session_id>/"

urlpatterns: list[URLPattern] = [
    path("", views.home, name="home"),
    path("sessions/new/", views.submit_session, name="session-submit"),
    path(SESSION, views.session_detail, name="session-page"),
    path(f"{SESSION}fragment/", views.session_fragment, name="session-fragment"),
    path(f"{SESSION}stop/", views.stop_session, name="session-page-stop"),
    path(f"{SESSION}cancel/", views.cancel_session, name="session-cancel"),
    path(f"{SESSION}retry/", retry.retry_session, name="session-retry"),
    # Not "session-extend"/"session-resume": those are the API's actions (portal.api.urls).
    path(f"{SESSION}extend/", views.extend_session, name="session-page-extend"),
    path(f"{SESSION}resume/", views.resume_session, name="session-page-resume"),
    # Never cached (Cache-Control: no-store): the page of a live desktop.
    path("desktop/<int:session_id>/", never_cache(views.desktop), name="desktop"),
    path("history/", views.history, name="history"),
]
