"""The console's alerts, reports and audit pages (admins only; 404 for anyone else).

Thin: forms call the ``check_*`` services, views call ``do_*``. The alerts section has one
template fragment (``console/_alerts.html``) for the page and for its live refresh.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any, cast

from django.contrib import messages
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import urlencode
from django.utils.translation import gettext as _
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from portal.console.access import admin_only
from portal.console.audit_search import (
    EXPORT_CAP,
    PAGE_SIZE,
    AuditSearch,
    export_rows,
    search_events,
)
from portal.console.ops_forms import AlertRuleForm, AuditSearchForm, CloseReportForm, ReportForm
from portal.kit.person import signed_in
from scheduling.models import Alert, AlertRule, AlertState
from scheduling.models.alerts import Metric
from scheduling.services import NotFound, ServiceError
from scheduling.services.accounting import Row, report_csv, row_fields, totals, usage_report
from scheduling.services.alert_changes import (
    check_acknowledge,
    check_resolve,
    do_acknowledge,
    do_resolve,
    do_save_rule,
)
from scheduling.services.alerts import ensure_default_rules
from scheduling.services.prices import closed_periods

RECENT_RESOLVED = 20
CHART_WIDTH = 400  # the SVG's user units; it scales to the page
CHART_TEXT = 16  # a row's label, above its bar
CHART_BAR = 18
CHART_GAP = 8
CHART_ROW = CHART_TEXT + CHART_BAR + CHART_GAP


# -- alerts ----------------------------------------------------------------------------------


def _alerts_context() -> dict[str, Any]:
    alerts = Alert.objects.select_related("rule", "acknowledged_by", "resolved_by")
    return {
        "open_alerts": list(alerts.open().order_by("-raised_at", "-pk")),
        "resolved_alerts": list(
            alerts.filter(state=AlertState.RESOLVED).order_by("-resolved_at", "-pk")[
                :RECENT_RESOLVED
            ]
        ),
    }


@admin_only
@require_GET
def alerts(request: HttpRequest) -> HttpResponse:
    """The current and recently resolved alerts, with Acknowledge and Resolve; the rules."""
    ensure_default_rules()  # the "Pool usage" rule (the admission threshold) is always there
    context = {
        **_alerts_context(),
        "rules": AlertRule.objects.all(),
        "page_config": {
            "fragment_url": reverse("console-alerts-fragment"),
            "words": {
                "live": _("Live"),
                "reconnecting": _("Reconnecting…"),
                "stopped": _("Not live: sign in again, then reload the page."),
            },
        },
    }
    return render(request, "console/alerts.html", context)


@admin_only
@require_GET
def alerts_fragment(request: HttpRequest) -> HttpResponse:
    """The alerts section alone, as the page shows it (its live refresh fetches this)."""
    return render(request, "console/_alerts.html", _alerts_context())


def _alert_action(request: HttpRequest, alert_id: int, resolve: bool) -> HttpResponse:
    person = signed_in(request.user)
    try:
        if resolve:
            alert = do_resolve(person, check_resolve(person, alert_id))
            messages.success(request, _("Alert %(id)s resolved.") % {"id": alert.pk})
        else:
            alert = do_acknowledge(person, check_acknowledge(person, alert_id))
            messages.success(request, _("Alert %(id)s acknowledged.") % {"id": alert.pk})
    except NotFound as error:
        raise Http404(error.message) from None
    except ServiceError as error:  # already acknowledged or resolved: say so, change nothing
        messages.error(request, error.message)
    return redirect("console-alerts")


@admin_only
@require_POST
def alert_acknowledge(request: HttpRequest, alert_id: int) -> HttpResponse:
    return _alert_action(request, alert_id, resolve=False)


@admin_only
@require_POST
def alert_resolve(request: HttpRequest, alert_id: int) -> HttpResponse:
    return _alert_action(request, alert_id, resolve=True)


@admin_only
@require_http_methods(["GET", "POST"])
def alert_rule(request: HttpRequest, rule_id: int | None = None) -> HttpResponse:
    """Edit a rule (or add one, without ``rule_id``): the form asks ``check_rule``."""
    person = signed_in(request.user)
    rule = get_object_or_404(AlertRule, pk=rule_id) if rule_id is not None else None
    form = AlertRuleForm(person, request.POST or None, rule=rule)
    status = 200
    if request.method == "POST":
        if form.is_valid() and form.checked is not None:
            saved = do_save_rule(person, form.checked)
            messages.success(request, _("Rule “%(name)s” saved.") % {"name": saved.name})
            return redirect("console-alerts")
        status = 400
    context = {
        "form": form,
        "rule": rule,
        "admission": rule is not None and rule.metric == Metric.POOL_USAGE,
    }
    return render(request, "console/alerts_rule.html", context, status=status)


# -- reports ---------------------------------------------------------------------------------


def _chart(rows: list[Row]) -> dict[str, Any]:
    """Horizontal bars of each row's GPU-hours (used, then booked), scaled to the longest,
    each under its label, so that the bars keep the page's width on a phone."""
    longest = max((r.gpu_hours + r.booked_gpu_hours for r in rows), default=Decimal(0))
    room = CHART_WIDTH - 70  # the total is written after the bar
    bars = []
    for i, row in enumerate(rows):
        used = float(row.gpu_hours / longest) * room if longest else 0.0
        booked = float(row.booked_gpu_hours / longest) * room if longest else 0.0
        top = i * CHART_ROW
        bars.append(
            {
                "row": row,
                "label_y": top + CHART_TEXT - 3,
                "y": top + CHART_TEXT,
                "text_y": top + CHART_TEXT + CHART_BAR - 4,
                "used": round(used, 2),
                "booked": round(booked, 2),
                "booked_x": round(used, 2),
                "value_x": round(used + booked + 6, 2),
                "total": row.gpu_hours + row.booked_gpu_hours,
            }
        )
    return {"bars": bars, "width": CHART_WIDTH, "height": max(len(rows), 1) * CHART_ROW}


@admin_only
@require_GET
def reports(request: HttpRequest) -> HttpResponse:
    """Usage and cost per department, course or user, by week or month; ``?format=csv``
    gives the same rows as ``accounting.report_csv`` (the API's CSV too)."""
    return reports_page(request)


def reports_page(
    request: HttpRequest, close_form: CloseReportForm | None = None, status: int = 200
) -> HttpResponse:
    """The reports page, with the form that closes a period (``close_form``: one refused)."""
    data = {**ReportForm.defaults(), **request.GET.dict()}
    form = ReportForm(data)
    closing: dict[str, Any] = {"closed": closed_periods()}
    if not form.is_valid() or form.checked is None:
        context: dict[str, Any] = {"form": form, "rows": None, **closing}
        return render(request, "console/reports.html", context, status=400)
    asked = form.checked
    if close_form is None:
        initial = {"start": asked.start, "end": asked.end}
        close_form = CloseReportForm(signed_in(request.user), initial=initial)
    closing["close_form"] = close_form
    rows = usage_report(asked.group, asked.period, asked.start, asked.end)
    query = {"group": asked.group, "period": asked.period}
    query |= {"start": asked.start.isoformat(), "end": asked.end.isoformat()}
    if request.GET.get("format") == "csv":
        response = HttpResponse(
            report_csv(row_fields(r) for r in rows), content_type="text/csv; charset=utf-8"
        )
        name = f"usage-{asked.group}-{asked.period}-{asked.start}-{asked.end}.csv"
        response["Content-Disposition"] = f'attachment; filename="{name}"'
        return response
    context = {
        "form": form,
        "rows": rows,
        "totals": totals(rows),
        "currency": rows[0].currency if rows else "",
        "chart": _chart(rows),
        "csv_url": f"{reverse('console-reports')}?{urlencode({**query, 'format': 'csv'})}",
        "api_url": f"/api/v1/usage/report/?{urlencode(query)}",
        **closing,
    }
    return render(request, "console/reports.html", context, status=status)


# -- audit -----------------------------------------------------------------------------------


@admin_only
@require_GET
def audit(request: HttpRequest) -> HttpResponse:
    """Search the audit trail, 50 events a page, newest first; ``?format=csv`` streams the
    whole search (at most ``EXPORT_CAP`` events). Read only."""
    form = AuditSearchForm(request.GET or None)
    if request.GET and not form.is_valid():
        return render(request, "console/audit.html", {"form": form}, status=400)
    search = form.search() if request.GET else AuditSearch()
    events = search_events(search)
    if request.GET.get("format") == "csv":
        stamp = timezone.localtime().strftime("%Y%m%d-%H%M%S")
        response = StreamingHttpResponse(
            export_rows(events), content_type="text/csv; charset=utf-8"
        )
        response["Content-Disposition"] = f'attachment; filename="audit-{stamp}.csv"'
        # admin_only is typed for HttpResponse; a streamed one is served the same way.
        return cast(HttpResponse, response)
    page = Paginator(events, PAGE_SIZE).get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    query.pop("format", None)
    csv_query = query.copy()
    csv_query["format"] = "csv"
    context = {
        "form": form,
        "page": page,
        "events": page.object_list,
        "query": query.urlencode(),
        "csv_url": f"{reverse('console-audit')}?{csv_query.urlencode()}",
        "export_cap": EXPORT_CAP,
    }
    return render(request, "console/audit.html", context)
