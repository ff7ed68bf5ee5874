"""The console's front page: where the pool stands, and the way to each console page."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from scheduling.choices import WAITING_STATES
from scheduling.models import Node, PoolPolicy, Session
from scheduling.services.pool import pool_utilisation

from .console_access import admin_only


@admin_only
def overview(request: HttpRequest) -> HttpResponse:
    policy = PoolPolicy.current()
    context = {
        "nodes": Node.objects.count(),
        "waiting": Session.objects.filter(state__in=WAITING_STATES).count(),
        "utilisation": pool_utilisation(),
        "alert_level": policy.alert_level,
    }
    return render(request, "console/overview.html", context)
