"""The console's queue, quota and desktop profile pages (admins only). Thin: forms ask the
``check_*`` services, the ``do_*`` services change, audit and ask for a cycle."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from portal.console.access import admin_only
from portal.console.queue_forms import GrantCapForm, ProfileForm, QueueActionForm, QuotaForm
from portal.kit.confirm import confirm_first
from portal.kit.person import actor_of
from scheduling.models import DesktopProfile, Quota
from scheduling.models.policy import PoolPolicy
from scheduling.services import ServiceError
from scheduling.services.catalogue_changes import (
    do_deactivate_profile,
    do_delete_quota,
    do_save_grant_cap,
    do_save_profile,
    do_save_quota,
    quotas_with_use,
)
from scheduling.services.console_queue import do_boost_request, do_cancel_request, queue_by_tier

# Queue


def _queue_context(failed: dict[str, Any] | None = None) -> dict[str, Any]:
    """``failed``: the action refused (its session id, action and form), shown on its row."""
    return {
        "tiers": queue_by_tier(),
        "failed": failed or {},
        "live": {
            "fragment": reverse("console-queue-fragment"),
            "words": {"stopped": _("Not live: sign in again, then reload the page.")},
        },
    }


@admin_only
def queue(request: HttpRequest) -> HttpResponse:
    return render(request, "console/queue.html", _queue_context())


@admin_only
def queue_fragment(request: HttpRequest) -> HttpResponse:
    """The queue section alone, as the page renders it: the live refresh swaps it in."""
    return render(request, "console/_queue_tiers.html", _queue_context())


def _queue_action(request: HttpRequest, session_id: int, action: str) -> HttpResponse:
    form = QueueActionForm(request.user, session_id, request.POST)  # type: ignore[arg-type]
    if form.is_valid() and form.session is not None:
        try:
            if action == "boost":
                do_boost_request(request.user, form.session, form.cleaned_data["reason"])  # type: ignore[arg-type]
                messages.success(request, _("Request %(id)s boosted.") % {"id": session_id})
            else:
                do_cancel_request(request.user, form.session, form.cleaned_data["reason"])  # type: ignore[arg-type]
                messages.success(request, _("Request %(id)s cancelled.") % {"id": session_id})
            return redirect("console-queue")
        except ServiceError as error:
            form.add_error(None, error.message)
    failed = {"session": session_id, "action": action, "form": form}
    return render(request, "console/queue.html", _queue_context(failed), status=400)


@admin_only
@require_POST
def queue_cancel(request: HttpRequest, session_id: int) -> HttpResponse:
    return _queue_action(request, session_id, "cancel")


@admin_only
@require_POST
def queue_boost(request: HttpRequest, session_id: int) -> HttpResponse:
    return _queue_action(request, session_id, "boost")


# Quotas


@admin_only
def quotas(request: HttpRequest) -> HttpResponse:
    form = QuotaForm(request.POST or None)
    if request.method == "POST" and form.is_valid() and form.change is not None:
        do_save_quota(actor_of(request), form.change)
        messages.success(request, _("Quota saved."))
        return redirect("console-quotas")
    status = 400 if form.is_bound else 200
    return _quotas_page(request, form, _grant_cap_form(), status)


def _grant_cap_form(data: Any = None) -> GrantCapForm:
    initial = {"max_granted_gpu_hours_week": PoolPolicy.current().max_granted_gpu_hours_week}
    return GrantCapForm(data, initial=initial)


def _quotas_page(
    request: HttpRequest, form: QuotaForm, cap_form: GrantCapForm, status: int
) -> HttpResponse:
    context = {"rows": quotas_with_use(), "form": form, "cap_form": cap_form}
    return render(request, "console/quotas.html", context, status=status)


@admin_only
@require_POST
def grant_cap(request: HttpRequest) -> HttpResponse:
    cap_form = _grant_cap_form(request.POST)
    if cap_form.is_valid() and cap_form.checked is not None:
        do_save_grant_cap(actor_of(request), cap_form.checked)
        messages.success(request, _("Weekly cap on granted GPU-hours saved."))
        return redirect("console-quotas")
    return _quotas_page(request, QuotaForm(), cap_form, 400)


@admin_only
def quota_edit(request: HttpRequest, quota_id: int) -> HttpResponse:
    quota = get_object_or_404(Quota, pk=quota_id)
    form = QuotaForm(request.POST or None, quota=quota)
    if request.method == "POST" and form.is_valid() and form.change is not None:
        do_save_quota(actor_of(request), form.change, quota)
        messages.success(request, _("Quota saved."))
        return redirect("console-quotas")
    status = 400 if form.is_bound else 200
    return render(
        request, "console/quotas_edit.html", {"form": form, "quota": quota}, status=status
    )


@admin_only
@require_POST
def quota_delete(request: HttpRequest, quota_id: int) -> HttpResponse:
    quota = get_object_or_404(Quota, pk=quota_id)
    back = reverse("console-quotas")
    if (ask := confirm_first(request, "delete_quota", back, key=quota.key)) is not None:
        return ask
    do_delete_quota(actor_of(request), quota)
    messages.success(request, _("Quota deleted."))
    return redirect("console-quotas")


# Desktop profiles


@admin_only
def profiles(request: HttpRequest) -> HttpResponse:
    form = ProfileForm(request.POST or None)
    if request.method == "POST" and form.is_valid() and form.change is not None:
        do_save_profile(actor_of(request), form.change)
        messages.success(request, _("Profile saved."))
        return redirect("console-profiles")
    status = 400 if form.is_bound else 200
    context = {"profiles": DesktopProfile.objects.all(), "form": form}
    return render(request, "console/profiles.html", context, status=status)


@admin_only
def profile_edit(request: HttpRequest, profile_id: int) -> HttpResponse:
    profile = get_object_or_404(DesktopProfile, pk=profile_id)
    form = ProfileForm(request.POST or None, profile=profile)
    if request.method == "POST" and form.is_valid() and form.change is not None:
        do_save_profile(actor_of(request), form.change, profile)
        messages.success(request, _("Profile saved."))
        return redirect("console-profiles")
    status = 400 if form.is_bound else 200
    return render(
        request, "console/profiles_edit.html", {"form": form, "profile": profile}, status=status
    )


@admin_only
@require_POST
def profile_deactivate(request: HttpRequest, profile_id: int) -> HttpResponse:
    profile = get_object_or_404(DesktopProfile, pk=profile_id)
    do_deactivate_profile(actor_of(request), profile)
    messages.success(request, _("%(name)s is no longer offered.") % {"name": profile.name})
    return redirect("console-profiles")
