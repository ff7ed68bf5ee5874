"""The console's metric history page (``/console/history/``, docs/metrics.md): one group's
charts over a range, each drawn by the vendored uPlot (``static/vendor/uplot/``) beside a
table of the same numbers; ``?format=csv`` downloads them. The numbers come from
``scheduling.services.metric_views``; this view only formats them for the page."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.utils.safestring import mark_safe
from django.utils.translation import gettext as _

from portal.console.access import admin_only
from portal.console.history_forms import HistoryForm
from scheduling.services.metric_views import History, history_csv, table_rows


def _number(value: float | None) -> str:
    return "—" if value is None else f"{value:g}"


def _charts(history: History) -> list[dict[str, Any]]:
    """Each chart with its table's body: a row per time (local time, ISO in ``<time>``), a
    cell per line. Built here as one string, not by template loops: a 30-day page has
    thousands of cells, and every piece of it is a number or a time made here (nothing to
    escape)."""
    zone = timezone.get_current_timezone()
    shown = "%Y-%m-%d %H:%M" if history.range != "1h" else "%H:%M"
    heads = []
    for at in history.times:
        local = at.astimezone(zone)
        heads.append(
            f'<tr><th scope="row"><time datetime="{local.isoformat()}">'
            f"{local.strftime(shown)}</time></th>"
        )
    charts = []
    for chart in history.charts:
        body = "".join(
            head + "".join(f"<td>{_number(v)}</td>" for v in values) + "</tr>"
            for head, (_at, values) in zip(heads, table_rows(history, chart), strict=True)
        )
        charts.append({"chart": chart, "body": mark_safe(body)})  # noqa: S308 - numbers only
    return charts


def _plot_data(history: History) -> dict[str, Any]:
    """What ``console_history.js`` draws: the times (Unix seconds), the time zone, and each
    chart's lines, in the page's language."""
    return {
        "zone": timezone.get_current_timezone_name(),
        "times": [int(at.timestamp()) for at in history.times],
        "charts": [
            {
                "id": f"chart-{c.name}",
                "unit": c.unit,
                "lines": [{"label": line.label, "values": line.values} for line in c.lines],
            }
            for c in history.charts
            if not c.empty
        ],
        "words": {"time": _("Time")},
    }


@admin_only
def history(request: HttpRequest) -> HttpResponse:
    form = HistoryForm({**HistoryForm.defaults(), **request.GET.dict()})
    if not form.is_valid() or form.checked is None:
        return render(request, "console/history.html", {"form": form}, status=400)
    asked: History = form.checked
    query = {"of": form.cleaned_data["of"], "range": asked.range}
    if request.GET.get("format") == "csv":
        response = HttpResponse(history_csv(asked), content_type="text/csv; charset=utf-8")
        stamp = timezone.localtime(asked.end).strftime("%Y%m%d-%H%M")
        name = "".join(
            ch if (ch.isascii() and ch.isalnum()) or ch in "-_." else "-" for ch in asked.source_key
        )
        response["Content-Disposition"] = (
            f'attachment; filename="history-{name}-{asked.range}-{stamp}.csv"'
        )
        return response
    context = {
        "form": form,
        "history": asked,
        "charts": _charts(asked),
        "plot": _plot_data(asked),
        "csv_url": f"{reverse('console-history')}?{urlencode({**query, 'format': 'csv'})}",
    }
    return render(request, "console/history.html", context)
