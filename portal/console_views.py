"""The console's front page: where the pool stands, and the way to each console page."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from scheduling.services.pool import pool_overview

from .console_access import admin_only


@admin_only
def overview(request: HttpRequest) -> HttpResponse:
    return render(request, "console/overview.html", {"pool": pool_overview()})
