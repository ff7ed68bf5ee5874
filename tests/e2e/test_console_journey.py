"""The admin's journey through the console in a real browser, in English and Simplified
Chinese: overview → pool → quota edit → an alert acknowledged on the page → the usage
report → an audit search. Debian's chromium (Playwright) in front of a real stack (daphne
portal, Celery worker); the alert is raised by the alert services, and reaches the open
page live over /ws/updates/. Every step is checked with axe-core (no serious or critical
violation) and saved as ``test-output/screenshots/admin-<lang>-<step>-<width>.png`` at 390
and 1280 px. The helpers are the faces' journeys' (tests/e2e/test_journeys.py).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.urls import NoReverseMatch, reverse
from django.utils import timezone

from scheduling.choices import AuditKind
from scheduling.models import Alert, AuditEvent, Quota, UsageRecord
from scheduling.models.policy import PoolPolicy
from scheduling.services.alert_changes import check_rule, do_save_rule
from scheduling.services.alerts import evaluate_alerts
from scheduling.services.audit import record

from ..conftest import gpu_inventory
from .conftest import log_in, wait_js
from .test_journeys import LANGUAGES, PHONE, Journey

pytestmark = [pytest.mark.browser, pytest.mark.integration]


def console_page(name: str) -> str | None:
    """The URL of a console page, or None where it is not built (yet)."""
    try:
        return reverse(name)
    except NoReverseMatch:
        return None


def off_the_browsers_thread(work) -> None:
    """Run ``work`` in a thread of its own: Playwright's event loop runs in the test's thread,
    where the broadcast after commit (async_to_sync) cannot run."""

    def run() -> None:
        try:
            work()
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=1) as pool:
        pool.submit(run).result()


def fits_a_phone(page) -> None:
    """At 390 px the page does not scroll sideways (wide tables scroll inside their card)."""
    page.set_viewport_size(PHONE)
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= PHONE["width"], f"{page.url} is {width} px wide on a phone"


def some_usage(user) -> None:
    """Two finished runs this week, so that the report draws bars."""
    start = timezone.now() - timedelta(hours=5)
    for hours, course in ((Decimal(2), "cs101"), (Decimal(1), "ee201")):
        UsageRecord.objects.create(
            user=user,
            username=user.username,
            department="cs",
            course_code=course,
            purpose="coursework",
            profile_slug="painting",
            slice_kind="share",
            gpu_share=0.5,
            compute_units=0.5,
            started_at=start,
            ended_at=start + timedelta(hours=float(hours)),
            end_state="ENDED",
            gpu_hours=hours / 2,
            cu_hours=hours / 2,
        )


@pytest.mark.parametrize("language", LANGUAGES)
def test_admin_edits_a_quota_acknowledges_an_alert_reads_the_report_and_searches_the_audit(
    stack, admin_user, owner, new_page, register_node, language
):
    some_usage(owner)
    node, _token = register_node("gpu-a01", [gpu_inventory("GPU-a", 0, mig_slices=4)])
    page = new_page()
    log_in(page, "root", "pw-root")
    journey = Journey(page, "admin", language)
    journey.choose_language("root")

    # The console's front page.
    page.goto("/console/")
    assert page.locator("nav.console-nav a[aria-current=page]").count() == 1
    journey.step("overview", phone=True)

    # The pool and the quotas are another engineer's pages: walk them where they exist.
    pool = console_page("console-pool")
    if pool is None:
        print("skipped the pool step: /console/pool/ is not built yet")
    else:
        page.goto(pool)
        assert page.locator("main h1").count() >= 1
        journey.step("pool", phone=True)
        # Drain the node, waiting for its sessions: nothing new goes there.
        form = page.locator("form[action$='/pool/nodes/']")
        form.locator("select[name=node]").select_option(str(node.pk))
        form.locator("select[name=action]").select_option("drain")
        form.locator("[name=reason]").fill("firmware update")
        form.locator("select[name=deadline]").select_option("wait")
        with page.expect_navigation():
            form.locator("button[type=submit]").click()
        node.refresh_from_db()
        assert node.draining_since is not None and node.drain_reason == "firmware update"
        journey.step("pool-drained", phone=True)

    quotas = console_page("console-quotas")
    if quotas is None:
        print("skipped the quota step: /console/quotas/ is not built yet")
    else:
        page.goto(quotas)
        form = page.locator("form:has(input[name=key])")
        form.locator("select[name=scope]").select_option("user")
        form.locator("input[name=key]").fill("ada")
        form.locator("input[name=max_gpu_hours_week]").fill("12")
        with page.expect_navigation():
            form.locator("button[type=submit]").click()
        quota = Quota.objects.get(scope="user", key="ada")
        assert quota.max_gpu_hours_week == 12
        journey.step("quotas", phone=True)
        # The weekly cap on granted GPU-hours: a refusal next to its field, then saved.
        cap = page.locator("form:has(input[name=max_granted_gpu_hours_week])")
        cap.locator("input[name=max_granted_gpu_hours_week]").fill("-5")
        with page.expect_navigation():
            cap.locator("button[type=submit]").click()
        assert page.locator("#id_max_granted_gpu_hours_week_error").count() == 1
        journey.step("grant-cap-refused", phone=True)
        cap = page.locator("form:has(input[name=max_granted_gpu_hours_week])")
        cap.locator("input[name=max_granted_gpu_hours_week]").fill("40")
        with page.expect_navigation():
            cap.locator("button[type=submit]").click()
        assert PoolPolicy.current().max_granted_gpu_hours_week == 40

    # Alerts: the page listens; a rule that fires on any queue raises an alert, which
    # appears without a reload; the admin acknowledges it.
    rule = do_save_rule(
        admin_user,
        check_rule(
            admin_user,
            {"name": "Any queue", "metric": "queue_length", "scope": "pool", "warning": 0},
        ),
    )
    page.goto("/console/alerts/")
    assert page.locator("#open-alerts").count() == 0
    live = journey.word("page-config", "live")
    wait_js(page, f"document.getElementById('live').textContent === {live!r}")
    # (The stack's beat may have raised it a moment earlier: either way one is open.)
    off_the_browsers_thread(evaluate_alerts)
    alert = Alert.objects.get(rule=rule, state="firing")
    row = f"#open-alerts tr[data-alert-id='{alert.pk}']"
    page.wait_for_selector(f"{row}[data-state=firing]")
    journey.step("alert-firing", phone=True)
    with page.expect_navigation():
        page.click(f"{row} button[name=acknowledge]")
    assert page.get_attribute(row, "data-state") == "acknowledged"
    assert page.locator("main .notice[role=status]").count() == 1
    alert.refresh_from_db()
    assert alert.state == "acknowledged" and alert.acknowledged_by == admin_user
    journey.step("alert-acknowledged", phone=True)
    fits_a_phone(page)

    # The usage report: per course, by week, this week.
    page.goto("/console/reports/")
    page.select_option("#report-form select[name=group]", "course")
    with page.expect_navigation():
        page.click("#report-form button[type=submit]")
    keys = page.locator("#report-table tbody tr").evaluate_all(
        "rows => rows.map(r => r.dataset.key).sort()"
    )
    assert keys == ["cs101", "ee201"]
    assert page.locator("#report svg rect.bar:not(.booked)").count() == 2
    assert "format=csv" in (page.get_attribute("#report-csv", "href") or "")
    journey.step("report", phone=True)
    fits_a_phone(page)

    # The audit: who acknowledged the alert.
    page.goto("/console/audit/")
    page.fill("#audit-form input[name=actor]", "root")
    page.select_option("#audit-form select[name=kind]", AuditKind.ALERT_ACKNOWLEDGED.value)
    with page.expect_navigation():
        page.click("#audit-form button[type=submit]")
    event = AuditEvent.objects.get(kind=AuditKind.ALERT_ACKNOWLEDGED)
    rows = page.locator("#audit-events tbody tr")
    assert rows.count() == 1
    assert rows.first.get_attribute("data-event-id") == str(event.pk)
    # Live: an event recorded elsewhere appears in the open search, without a reload.
    marker = page.evaluate("window.__consoleMarker = Math.random()")
    off_the_browsers_thread(
        lambda: record(AuditKind.ALERT_ACKNOWLEDGED, "user:root", data={"alert": 0})
    )
    wait_js(page, "document.querySelectorAll('#audit-events tbody tr').length === 2")
    assert page.evaluate("window.__consoleMarker") == marker, "the page was reloaded"
    journey.step("audit", phone=True)
    fits_a_phone(page)
