"""The console's idle page (issue 15, docs/lifecycle.md): the sessions idle now. Admins only."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from scheduling.services.idle_view import sessions_idle_now

from .console_access import admin_only


@admin_only
@require_GET
def idle(request: HttpRequest) -> HttpResponse:
    return render(request, "console/idle.html", {"sessions": sessions_idle_now()})
