"""The console's price list (``/console/prices/``) and closing a report period (from the
reports page): admins only. Thin: the forms ask ``accounting.check_price`` and
``prices.check_*``; the views call ``do_*`` (docs/accounting.md)."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import urlencode
from django.utils.translation import gettext as _
from django.views.decorators.http import require_http_methods, require_POST

from portal.console.access import admin_only
from portal.console.ops import reports_page
from portal.console.ops_forms import CloseReportForm, PriceAddForm, PriceCorrectForm, PriceEndForm
from portal.kit.person import signed_in
from scheduling.models import PriceRule
from scheduling.services import ServiceError
from scheduling.services.accounting import do_price
from scheduling.services.prices import (
    closed_periods,
    do_close,
    do_correct,
    do_end,
    price_list,
)


def _state(rule: PriceRule) -> str:
    today = timezone.localdate()
    if rule.valid_from > today:
        return "future"
    if rule.valid_until is not None and rule.valid_until < today:
        return "past"
    return "current"


def _page(
    request: HttpRequest,
    add_form: PriceAddForm | None = None,
    failed_end: PriceEndForm | None = None,
    status: int = 200,
) -> HttpResponse:
    person = signed_in(request.user)
    lines: list[dict[str, Any]] = []
    for rule in price_list():
        if failed_end is not None and failed_end.rule.pk == rule.pk:
            end_form = failed_end
        else:
            end_form = PriceEndForm(person, rule)
        lines.append({"rule": rule, "state": _state(rule), "end_form": end_form})
    context = {
        "lines": lines,
        "add_form": add_form or PriceAddForm(),
        "closed": closed_periods(),
    }
    return render(request, "console/prices.html", context, status=status)


@admin_only
@require_http_methods(["GET", "POST"])
def prices(request: HttpRequest) -> HttpResponse:
    """The lines, current and past, each with End and Correct; a form to add one."""
    if request.method == "GET":
        return _page(request)
    form = PriceAddForm(request.POST)
    if form.is_valid() and form.checked is not None:
        rule = do_price(signed_in(request.user), form.checked)
        messages.success(request, _("Price line %(id)s added.") % {"id": rule.pk})
        return redirect("console-prices")
    return _page(request, add_form=form, status=400)


@admin_only
@require_POST
def price_end(request: HttpRequest, rule_id: int) -> HttpResponse:
    person = signed_in(request.user)
    rule = get_object_or_404(PriceRule, pk=rule_id)
    form = PriceEndForm(person, rule, request.POST)
    if form.is_valid() and form.checked is not None:
        try:
            ended = do_end(person, form.checked)
        except ServiceError as error:  # changed meanwhile: say why, change nothing
            form.add_service_error(error)
        else:
            messages.success(
                request,
                _("Price line %(id)s now ends on %(until)s.")
                % {"id": ended.pk, "until": ended.valid_until},
            )
            return redirect("console-prices")
    return _page(request, failed_end=form, status=400)


@admin_only
@require_http_methods(["GET", "POST"])
def price_correct(request: HttpRequest, rule_id: int) -> HttpResponse:
    person = signed_in(request.user)
    rule = get_object_or_404(PriceRule.objects.select_related("profile"), pk=rule_id)
    form = PriceCorrectForm(person, rule, request.POST or None)
    status = 200
    if request.method == "POST":
        if form.is_valid() and form.checked is not None:
            try:
                corrected = do_correct(person, form.checked)
            except ServiceError as error:
                form.add_service_error(error)
            else:
                messages.success(request, _("Price line %(id)s corrected.") % {"id": corrected.pk})
                return redirect("console-prices")
        status = 400
    frozen = rule.closed_reports.order_by("-period_end").first()
    context = {"form": form, "rule": rule, "frozen": frozen}
    return render(request, "console/prices_correct.html", context, status=status)


@admin_only
@require_POST
def report_close(request: HttpRequest) -> HttpResponse:
    """Close a report period (the reports page's form); back to that period's report."""
    person = signed_in(request.user)
    form = CloseReportForm(person, request.POST)
    if form.is_valid() and form.checked is not None:
        try:
            closed = do_close(person, form.checked)
        except ServiceError as error:
            form.add_service_error(error)
        else:
            messages.success(
                request,
                _("The period %(start)s to %(end)s is closed: %(lines)s price lines used.")
                % {
                    "start": closed.period_start,
                    "end": closed.period_end,
                    "lines": closed.lines.count(),
                },
            )
            query = {"start": closed.period_start.isoformat(), "end": closed.period_end.isoformat()}
            return redirect(f"{reverse('console-reports')}?{urlencode(query)}")
    return reports_page(request, close_form=form, status=400)
