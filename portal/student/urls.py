"""The student face's URLs: home, a session and its actions, the desktop, history, files, and
the Accessibility page (everyone's)."""

from __future__ import annotations

from django.urls import URLPattern, path
from django.views.decorators.cache import never_cache

from portal.student import accessibility, files, retry, views

SESSION = "sessions/<int:session_id>/"

urlpatterns: list[URLPattern] = [
    path("", views.home, name="home"),
    path("sessions/new/", views.submit_session, name="session-submit"),
    path(SESSION, views.session_detail, name="session-page"),
    path(f"{SESSION}stop/", views.stop_session, name="session-page-stop"),
    path(f"{SESSION}cancel/", views.cancel_session, name="session-cancel"),
    path(f"{SESSION}retry/", retry.retry_session, name="session-retry"),
    # Not "session-extend"/"session-resume": those are the API's actions (portal.api.urls).
    path(f"{SESSION}extend/", views.extend_session, name="session-page-extend"),
    path(f"{SESSION}resume/", views.resume_session, name="session-page-resume"),
    # Never cached (Cache-Control: no-store): the page of a live desktop.
    path("desktop/<int:session_id>/", never_cache(views.desktop), name="desktop"),
    path("history/", views.history, name="history"),
    # The Files page (issue 27): home tasks carried out by the node keeping the home; upload
    # and download hand out gateway tickets.
    path("files/", files.files, name="files"),
    path("files/upload/", files.upload, name="files-upload"),
    path("files/download/", files.download, name="files-download"),
    path("files/delete/", files.delete, name="files-delete"),
    path("files/tasks/<int:task_id>/", files.task_view, name="files-task"),
    # Open to everyone, signed in or not: linked from every page's footer.
    path("accessibility/", accessibility.accessibility, name="accessibility"),
]
