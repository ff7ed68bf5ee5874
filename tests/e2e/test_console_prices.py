"""Issue 39 in a real browser, in English and Simplified Chinese: the admin sets the pool's
one admission threshold on the "Pool usage" alert rule and a student's hobby request is
refused at it, the reason naming the level; the admin corrects a price line and ends one on
the Prices page, and closes a report period. Debian's chromium (Playwright) in front of a
real stack; axe at each step (no serious or critical violation), screenshots as in
tests/e2e/test_console_journey.py."""

from __future__ import annotations

from datetime import date, timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from scheduling.choices import AuditKind, SessionState
from scheduling.models import AlertRule, AuditEvent, PriceRule, Session
from scheduling.models.usage import ClosedReport
from scheduling.services.accounting import check_price, do_price
from scheduling.services.alerts import ensure_default_rules
from scheduling.services.cycle import do_scheduling_cycle
from scheduling.services.lifecycle import do_transition
from scheduling.services.sessions import check_submit, do_submit

from ..conftest import gpu_inventory
from .conftest import log_in
from .test_console_journey import off_the_browsers_thread
from .test_journeys import LANGUAGES, Journey

pytestmark = [pytest.mark.browser, pytest.mark.integration]


def two_running(make_user, profile) -> None:
    """Two of the node's four MIG slices held by running hobby desktops: the pool at 50%."""
    for name in ("filler0", "filler1"):
        user = make_user(name)
        do_submit(user, check_submit(user, profile.pk, "hobby", None))
    do_scheduling_cycle()
    for session in Session.objects.filter(state=SessionState.PLACED):
        started = timezone.now() - timedelta(minutes=30)
        do_transition(session.pk, SessionState.RUNNING, actor="test", started_at=started)


@pytest.mark.parametrize("language", LANGUAGES)
def test_the_admin_sets_the_admission_threshold_and_a_hobby_request_is_refused_at_it(
    stack, admin_user, owner, profile, make_user, new_page, register_node, language
):
    register_node("gpu-a01", [gpu_inventory("GPU-a", 0, mig_slices=4)])
    off_the_browsers_thread(lambda: two_running(make_user, profile))
    ensure_default_rules()
    rule = AlertRule.objects.get(metric="pool_usage")

    admin = new_page()
    log_in(admin, "root", "pw-root")
    journey = Journey(admin, "admin", language)
    journey.choose_language("root")
    admin.goto(f"/console/alerts/rules/{rule.pk}/")
    assert admin.locator("#admission-hint").count() == 1
    journey.step("admission-rule", phone=True)
    form = admin.locator("#rule-form")
    form.locator("input[name=warning]").fill("20")
    form.locator("input[name=critical]").fill("10")  # below the warning: refused
    with admin.expect_navigation():
        form.locator("button[type=submit]").click()
    assert admin.locator("#rule-form .has-error input[name=critical]").count() == 1
    journey.step("admission-refused", phone=True)
    form = admin.locator("#rule-form")
    form.locator("input[name=critical]").fill("40")
    form.locator("input[name=recovery]").fill("10")
    with admin.expect_navigation():
        form.locator("button[type=submit]").click()
    rule.refresh_from_db()
    assert (rule.warning, rule.critical) == (20.0, 40.0)
    change = AuditEvent.objects.filter(kind=AuditKind.ALERT_RULE_CHANGED).latest("pk")
    assert change.data["after"]["critical"] == 40.0

    student = new_page()
    log_in(student, "ada", "pw-ada")
    walk = Journey(student, "student", language)
    walk.choose_language("ada")
    student.check(f"#profile-{profile.pk}")
    student.check("#purpose-hobby")
    with student.expect_navigation():
        student.click("#submit-form button[type=submit]")
    refusal = student.inner_text("#purpose-error")
    assert "40%" in refusal and "50%" in refusal, refusal  # the level, and where the pool is
    assert not Session.objects.filter(user=owner).exists()
    walk.step("admission-hobby-refused", phone=True)


def add_line(user, price: str, first: date, kind: str) -> PriceRule:
    request = check_price(
        slice_kind=kind,
        profile="",
        unit="gpu_hour",
        price=Decimal(price),
        currency="CHF",
        valid_from=first,
        valid_until=None,
    )
    return do_price(user, request)


@pytest.mark.parametrize("language", LANGUAGES)
def test_the_admin_corrects_a_price_ends_a_line_and_closes_a_period(
    stack, admin_user, new_page, language
):
    today = timezone.localdate()
    first = today.replace(day=1) - timedelta(days=62)
    typo = add_line(admin_user, "25.0000", first, "share")
    other = add_line(admin_user, "4.0000", first, "whole")
    page = new_page()
    log_in(page, "root", "pw-root")
    journey = Journey(page, "admin", language)
    journey.choose_language("root")

    page.goto("/console/")
    with page.expect_navigation():
        page.click("nav.console-nav a[href='/console/prices/']")
    assert page.locator(f"#price-{typo.pk}").count() == 1
    journey.step("prices", phone=True)

    # Correct the typo: a bad price is refused next to its field, then 2.50 is saved.
    with page.expect_navigation():
        page.click(f"#correct-{typo.pk}")
    page.fill("#price-correct-form input[name=price]", "-1")
    with page.expect_navigation():
        page.click("#price-correct-form button[type=submit]")
    assert page.locator("#price-correct-form .has-error input[name=price]").count() == 1
    journey.step("price-correct-refused", phone=True)
    page.fill("#price-correct-form input[name=price]", "2.50")
    with page.expect_navigation():
        page.click("#price-correct-form button[type=submit]")
    typo.refresh_from_db()
    assert typo.price == Decimal("2.5000")
    assert page.inner_text(f"#price-{typo.pk} [data-field=price]").startswith("2.5000 CHF")
    journey.step("price-corrected", phone=True)

    # End the other line: before its first day is refused, then the end of last month.
    end_form = f"#end-form-{other.pk}"
    page.fill(f"{end_form} input[type=date]", (first - timedelta(days=1)).isoformat())
    with page.expect_navigation():
        page.click(f"{end_form} button[type=submit]")
    assert page.locator(f"{end_form} .has-error").count() == 1
    journey.step("price-end-refused", phone=True)
    last_month = today.replace(day=1) - timedelta(days=1)
    page.fill(f"{end_form} input[type=date]", last_month.isoformat())
    with page.expect_navigation():
        page.click(f"{end_form} button[type=submit]")
    other.refresh_from_db()
    assert other.valid_until == last_month
    journey.step("price-ended", phone=True)
    actions = AuditEvent.objects.filter(kind=AuditKind.USAGE_PRICES_CHANGED)
    assert {"corrected", "ended"} <= {e.data["action"] for e in actions}

    # Close three weeks two months back on the reports page: listed with the lines it used.
    closing_end = first + timedelta(days=20)
    page.goto(f"/console/reports/?start={first.isoformat()}&end={closing_end.isoformat()}")
    page.fill("#close-form input[name=close-start]", first.isoformat())
    page.fill("#close-form input[name=close-end]", closing_end.isoformat())
    with page.expect_navigation():
        page.click("#close-form button[type=submit]")
    assert ClosedReport.objects.filter(period_end=closing_end).count() == 1
    assert page.locator("#closed-reports li").count() == 1
    journey.step("period-closed", phone=True)
