"""The console's metric history page in a real browser, in English and Simplified Chinese:
Debian's chromium (Playwright) in front of a real stack (daphne portal, Celery worker). The
admin opens the page, sees each chart drawn by the vendored uPlot (a canvas) beside its
table, switches the range and the group with the keyboard only, and downloads the CSV.
Every step is checked with axe-core (no serious or critical violation) at 1280 and 390 px
and photographed (``test-output/screenshots/admin-<lang>-history-*.png``); the page runs
under the portal's real Content-Security-Policy (the fixture fails on any refusal).
"""

from __future__ import annotations

import csv
import io
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from scheduling.models import MetricRollup, MetricSource
from scheduling.models.metrics import FIVE_MINUTES, HOURLY
from scheduling.services.metric_history import sources, tier_key

from .conftest import log_in, wait_js
from .test_console_journey import fits_a_phone
from .test_journeys import LANGUAGES, Journey

pytestmark = [pytest.mark.browser, pytest.mark.integration]

KEYS = ["pool", tier_key("thesis"), tier_key("hobby"), "node:gpu-a01", "node:gpu-b02"]


def recorded_history() -> None:
    """A day of 5-minute rollups and a week of hourly ones for the pool, two tiers and two
    nodes, made up but shaped as the rollup task writes them."""
    ids = sources({key: {"kind": MetricSource.Kind.GROUP} for key in KEYS})
    now = timezone.now().replace(second=0, microsecond=0)
    rows = []
    for resolution, buckets in ((FIVE_MINUTES, 288), (HOURLY, 168)):
        last = now - timedelta(seconds=now.timestamp() % resolution + resolution)
        for n in range(buckets):
            bucket = last - timedelta(seconds=n * resolution)
            for key in KEYS:
                values = {"count": max(1, resolution // 300)}
                if key.startswith("tier:"):
                    values |= {"queue_length_avg": n % 7, "queue_wait_p95_s_max": 30.0 + n % 11}
                else:
                    values |= {
                        "utilization_pct_avg": 40.0 + n % 50,
                        "utilization_pct_max": 95.0,
                        "memory_used_mb_avg": 20480.0,
                        "power_w_avg": 900.0 + n % 90,
                        "temperature_c_avg": 55.0 + n % 20,
                    }
                if key == "pool":
                    values |= {"started_avg": 1.0, "runs_ended_avg": 1.0, "failed_avg": 0.25}
                rows.append(
                    MetricRollup(source_id=ids[key], resolution=resolution, bucket=bucket, **values)
                )
    MetricRollup.objects.bulk_create(rows)


def plotted_times(page) -> list[int]:
    """The times the page hands its chart script (json_script "history-data")."""
    return page.evaluate("JSON.parse(document.getElementById('history-data').textContent).times")


def drawn(page) -> int:
    """How many charts uPlot has drawn (a canvas in each chart's box)."""
    return page.evaluate(
        "document.querySelectorAll('.history-plot[data-drawn=true] canvas').length"
    )


@pytest.mark.parametrize("language", LANGUAGES)
def test_admin_reads_the_history_switches_range_and_group_by_keyboard_and_downloads_the_csv(
    stack, admin_user, new_page, language
):
    recorded_history()
    page = new_page()
    log_in(page, "root", "pw-root")
    journey = Journey(page, "admin", language)
    journey.choose_language("root")

    # From the console's navigation to the page: the pool over the last day.
    page.goto("/console/")
    with page.expect_navigation():
        page.click("nav.console-nav a[href='/console/history/']")
    assert page.get_attribute("nav.console-nav a[aria-current=page]", "href") == "/console/history/"
    assert page.is_checked("#history-form input[name=range][value='1d']")
    charts = page.locator(".history-chart").count()
    assert charts == 7  # utilisation, memory, power, temperature, queue, wait, desktops
    wait_js(
        page,
        f"document.querySelectorAll('.history-plot[data-drawn=true] canvas').length === {charts}",
    )
    rows = page.locator("#table-utilisation tbody tr").count()
    # a day of 5-minute intervals (one more or less where a 5-minute boundary passed since)
    assert 286 <= rows <= 289 and rows == len(plotted_times(page))
    assert page.locator("#table-utilisation caption").count() == 1
    assert page.locator("#table-queue thead th[scope=col]").count() == 4  # time + three tiers
    # the legend names each line, and each line has its own dash
    legend = page.locator("#chart-queue .u-legend .u-series").all_inner_texts()
    assert len(legend) == 4
    journey.step("history", phone=True)
    fits_a_phone(page)
    page.set_viewport_size({"width": 1280, "height": 900})

    # The range by keyboard: the checked radio, the arrow to the next (7 days), Tab to the
    # button, Enter.
    page.focus("#history-form input[name=range]:checked")
    page.keyboard.press("ArrowRight")
    assert page.is_checked("#history-form input[name=range][value='7d']")
    page.keyboard.press("Tab")
    with page.expect_navigation():
        page.keyboard.press("Enter")
    assert "range=7d" in page.url
    rows = page.locator("#table-utilisation tbody tr").count()
    assert 167 <= rows <= 169 and rows == len(plotted_times(page))  # hourly, a week
    wait_js(page, "document.querySelectorAll('.history-plot[data-drawn=true] canvas').length === 7")

    # The group by keyboard: the select, the arrow down to the first node, then Tab past
    # the range to the button, and Enter.
    page.focus("#history-form select[name=of]")
    page.keyboard.press("ArrowDown")
    assert page.input_value("#history-form select[name=of]") == "node:gpu-a01"
    page.keyboard.press("Tab")  # the range's checked radio
    page.keyboard.press("Tab")  # the button
    with page.expect_navigation():
        page.keyboard.press("Enter")
    assert "of=node%3Agpu-a01" in page.url and "range=7d" in page.url
    assert page.locator(".history-chart").count() == 4  # a node has no queue of its own
    wait_js(page, "document.querySelectorAll('.history-plot[data-drawn=true] canvas').length === 4")
    assert drawn(page) == 4
    journey.step("history-node", phone=True)
    fits_a_phone(page)

    # The CSV: the same numbers as the table.
    with page.expect_download() as download:
        page.click("#history-csv")
    assert download.value.suggested_filename.startswith("history-node-gpu-a01-7d-")
    text = Path(download.value.path()).read_text(encoding="utf-8")
    table = list(csv.reader(io.StringIO(text)))
    assert len(table) == 1 + page.locator("#table-utilisation tbody tr").count()
    first_cells = page.locator("#table-utilisation tbody tr").first.locator("td").all_inner_texts()
    assert float(table[1][2]) == float(first_cells[0])  # the first line of the first chart
