"""The console's front page: where the pool stands, and the way to each console page."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from portal.console.access import admin_only
from scheduling.services.pool import pool_overview


@admin_only
def overview(request: HttpRequest) -> HttpResponse:
    return render(request, "console/overview.html", {"pool": pool_overview()})
