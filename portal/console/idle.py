"""The console's idle pages (issue 15, docs/lifecycle.md), admins only: the sessions idle
now, the idle policy rows (create, edit, delete; audited by ``services.idle_policies``), and
the GPU idle allocated hours per course and department (``services.idle_hours``)."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_GET, require_POST

from portal.console.access import admin_only
from portal.console.idle_forms import IdleHoursForm, IdlePolicyForm
from portal.kit.person import actor_of
from scheduling.models import IdlePolicy
from scheduling.services.idle_hours import idle_hours
from scheduling.services.idle_policies import (
    DEFAULTS,
    do_delete_idle_policy,
    do_save_idle_policy,
    policy_rows,
    shown,
)
from scheduling.services.idle_view import sessions_idle_now


@admin_only
@require_GET
def idle(request: HttpRequest) -> HttpResponse:
    return render(request, "console/idle.html", {"sessions": sessions_idle_now()})


# Idle policies


@admin_only
def policies(request: HttpRequest) -> HttpResponse:
    """The rows, the defaults that apply where none does, and a form for a new row."""
    form = IdlePolicyForm(request.POST or None)
    if request.method == "POST" and form.is_valid() and form.change is not None:
        do_save_idle_policy(actor_of(request), form.change)
        messages.success(request, _("Idle policy saved."))
        return redirect("console-idle-policies")
    status = 400 if form.is_bound else 200
    context = {"policies": policy_rows(), "defaults": shown(DEFAULTS), "form": form}
    return render(request, "console/idle_policies.html", context, status=status)


@admin_only
def policy_edit(request: HttpRequest, policy_id: int) -> HttpResponse:
    policy = get_object_or_404(IdlePolicy.objects.select_related("profile"), pk=policy_id)
    form = IdlePolicyForm(request.POST or None, policy=policy)
    if request.method == "POST" and form.is_valid() and form.change is not None:
        do_save_idle_policy(actor_of(request), form.change, policy)
        messages.success(request, _("Idle policy saved."))
        return redirect("console-idle-policies")
    status = 400 if form.is_bound else 200
    context = {"form": form, "policy": policy}
    return render(request, "console/idle_policy_edit.html", context, status=status)


@admin_only
@require_POST
def policy_delete(request: HttpRequest, policy_id: int) -> HttpResponse:
    policy = get_object_or_404(IdlePolicy.objects.select_related("profile"), pk=policy_id)
    do_delete_idle_policy(actor_of(request), policy)
    messages.success(request, _("Idle policy deleted."))
    return redirect("console-idle-policies")


# GPU idle allocated hours


@admin_only
@require_GET
def hours(request: HttpRequest) -> HttpResponse:
    """Allocated and idle GPU-hours per course and department; ``?days=`` 1 to 90."""
    form = IdleHoursForm(request.GET if "days" in request.GET else None)
    if form.is_bound and not form.is_valid():
        return render(request, "console/idle_hours.html", {"form": form}, status=400)
    days = form.cleaned_data["days"] if form.is_bound else None
    context = {"form": form, "report": idle_hours(days)}
    return render(request, "console/idle_hours.html", context)
