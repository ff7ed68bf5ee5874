"""Correcting the price list (issue 39, item 3): end a line, correct a line no closed report
used, close a report period; refusals, audit rows, the API's actions and permissions, the
console's Prices page, and the reports naming the line that priced each row.

Real PostgreSQL."""

from __future__ import annotations

import csv
import io
from datetime import date, datetime, timedelta
from decimal import Decimal

import pytest
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from scheduling.choices import AuditKind
from scheduling.models import AuditEvent, PriceRule, UsageRecord
from scheduling.models.usage import ClosedReport
from scheduling.rules import pricing
from scheduling.services import ServiceError
from scheduling.services.accounting import (
    check_price,
    do_price,
    report_csv,
    row_fields,
    usage_report,
)
from scheduling.services.eligibility import Forbidden
from scheduling.services.prices import (
    check_close,
    check_correct,
    check_end,
    do_close,
    do_correct,
    do_end,
)

pytestmark = pytest.mark.django_db

JAN = date(2026, 1, 1)


def add(user, price: str, first: date, until: date | None = None, kind: str = "share"):
    request = check_price(
        slice_kind=kind,
        profile="",
        unit="gpu_hour",
        price=Decimal(price),
        currency="CHF",
        valid_from=first,
        valid_until=until,
    )
    return do_price(user, request)


def use(user, day: date, hours: int = 2, share: float = 0.5) -> UsageRecord:
    started = timezone.make_aware(datetime(day.year, day.month, day.day, 10, 0))
    gpu_hours = pricing.held_hours(share, Decimal(hours))
    return UsageRecord.objects.create(
        user=user,
        username=user.username,
        department="Physics",
        course_code="ph1",
        purpose="coursework",
        profile_slug="painting",
        slice_kind="share",
        gpu_share=share,
        compute_units=share,
        started_at=started,
        ended_at=started + timedelta(hours=hours),
        end_state="ENDED",
        gpu_hours=gpu_hours,
        cu_hours=gpu_hours,
    )


def price_events(action: str) -> list[AuditEvent]:
    events = AuditEvent.objects.filter(kind=AuditKind.USAGE_PRICES_CHANGED, data__action=action)
    return list(events.order_by("pk"))


def test_end_a_line_from_a_date_audited(admin_user):
    line = add(admin_user, "2.0000", JAN)
    with pytest.raises(ServiceError) as early:
        check_end(admin_user, line.pk, date(2025, 12, 31))
    assert early.value.field == "valid_until" and "before its first day" in early.value.message
    ended = do_end(admin_user, check_end(admin_user, line.pk, date(2026, 3, 31)))
    assert ended.valid_until == date(2026, 3, 31)
    [event] = price_events("ended")
    assert event.data["line"] == line.pk and event.actor == f"user:{admin_user.username}"
    assert event.data["before"]["valid_until"] is None
    assert event.data["after"]["valid_until"] == "2026-03-31"
    with pytest.raises(ServiceError) as later:  # ending moves the end earlier only
        check_end(admin_user, line.pk, date(2026, 4, 30))
    assert "already ends on 2026-03-31" in later.value.message
    # The freed dates take a new line of the same key.
    add(admin_user, "2.5000", date(2026, 4, 1))


def test_correct_a_typo_audited_and_overlaps_refused(admin_user, make_user):
    typo = add(admin_user, "25.0000", JAN, date(2026, 5, 31))
    add(admin_user, "3.0000", date(2026, 6, 1))
    fixed = do_correct(admin_user, check_correct(admin_user, typo.pk, {"price": "2.5"}))
    assert fixed.price == Decimal("2.5000") and fixed.valid_until == date(2026, 5, 31)
    [event] = price_events("corrected")
    assert (event.data["before"]["price"], event.data["after"]["price"]) == ("25.0000", "2.5000")
    with pytest.raises(ServiceError) as overlap:  # into the next line of the same key
        check_correct(admin_user, typo.pk, {"valid_until": date(2026, 6, 30)})
    assert overlap.value.field == "valid_from" and "already valid" in overlap.value.message
    with pytest.raises(ServiceError) as negative:
        check_correct(admin_user, typo.pk, {"price": "-1"})
    assert negative.value.field == "price"
    with pytest.raises(ServiceError) as currency:  # the list's one currency
        check_correct(admin_user, typo.pk, {"currency": "EUR"})
    assert currency.value.field == "currency"
    with pytest.raises(ServiceError) as same:
        check_correct(admin_user, typo.pk, {"price": "2.5"})
    assert "says this already" in same.value.message
    with pytest.raises(Forbidden):
        check_correct(make_user("student"), typo.pk, {"price": "1"})
    with pytest.raises(ServiceError):
        check_correct(admin_user, 999999, {"price": "1"})


def test_a_closed_report_freezes_the_lines_it_used(admin_user, make_user):
    ada = make_user("ada")
    used = add(admin_user, "2.0000", JAN)  # share
    unused = add(admin_user, "9.0000", JAN, kind="whole")  # no whole-GPU use in January
    use(ada, date(2026, 1, 12))
    with pytest.raises(ServiceError) as not_over:
        check_close(admin_user, JAN, timezone.localdate())
    assert not_over.value.field == "end"
    closed = do_close(admin_user, check_close(admin_user, JAN, date(2026, 1, 31), "settled"))
    assert list(closed.lines.values_list("pk", flat=True)) == [used.pk]
    [event] = price_events("closed")
    assert event.data["lines"] == [used.pk] and event.data["cost"] == "2.00"
    with pytest.raises(ServiceError) as again:
        check_close(admin_user, date(2026, 1, 15), date(2026, 2, 15))
    assert "closed already" in again.value.message

    # The used line: no correction, an end no earlier than the period's last day.
    with pytest.raises(ServiceError) as frozen:
        check_correct(admin_user, used.pk, {"price": "1.0"})
    assert "2026-01-01 to 2026-01-31 used this line" in frozen.value.message
    with pytest.raises(ServiceError) as inside:
        check_end(admin_user, used.pk, date(2026, 1, 20))
    assert "2026-01-31 or later" in inside.value.message
    do_end(admin_user, check_end(admin_user, used.pk, date(2026, 1, 31)))
    # The unused one: corrected, but its days in January stay its days.
    do_correct(admin_user, check_correct(admin_user, unused.pk, {"price": "8.0"}))
    with pytest.raises(ServiceError) as moved:
        check_correct(admin_user, unused.pk, {"valid_from": date(2026, 1, 10)})
    assert moved.value.field == "valid_from" and "same days" in moved.value.message
    # No new line into the closed period.
    with pytest.raises(ServiceError) as into:
        add(admin_user, "1.0000", date(2026, 1, 20), kind="mig")
    assert "is closed" in into.value.message
    # The closed period's figures stay: the report prices January with line "used".
    [row] = usage_report("department", "month", JAN, date(2026, 1, 31))
    assert row.cost == Decimal("2.00") and list(row.lines) == [used.pk]
    assert ClosedReport.objects.count() == 1


def test_the_report_names_the_line_that_priced_each_row(admin_user, make_user):
    ada = make_user("ada")
    old = add(admin_user, "2.0000", JAN, date(2026, 1, 31))
    new = add(admin_user, "3.0000", date(2026, 2, 1))
    use(ada, date(2026, 1, 12))  # 1 GPU-hour at 2
    use(ada, date(2026, 2, 9), hours=4)  # 2 GPU-hours at 3
    rows = usage_report("department", "month", JAN, date(2026, 2, 28))
    assert [row_fields(r)["price_lines"] for r in rows] == [
        f"#{old.pk} 2.0000 CHF/gpu_hour: 2.00",
        f"#{new.pk} 3.0000 CHF/gpu_hour: 6.00",
    ]
    [header, *lines] = list(csv.reader(io.StringIO(report_csv(row_fields(r) for r in rows))))
    assert header[-1] == "price_lines" and lines[1][-1] == f"#{new.pk} 3.0000 CHF/gpu_hour: 6.00"
    admin = Client()
    admin.force_login(admin_user)
    page = admin.get(
        "/console/reports/?group=department&period=month&start=2026-01-01&end=2026-02-28"
    )
    html = page.content.decode()
    assert f'href="/console/prices/#price-{new.pk}">#{new.pk}</a>' in html
    assert 'id="close-form"' in html


def test_the_api_ends_and_corrects_for_admins_only(admin_user, make_user):
    line = add(admin_user, "25.0000", JAN)
    student = APIClient()
    student.force_authenticate(make_user("student"))
    assert (
        student.post(f"/api/v1/prices/{line.pk}/end/", {"valid_until": "2026-02-28"}).status_code
        == 403
    )
    assert student.post(f"/api/v1/prices/{line.pk}/correct/", {"price": "2.5"}).status_code == 403
    assert APIClient().post(f"/api/v1/prices/{line.pk}/end/", {}).status_code in (401, 403)
    admin = APIClient()
    admin.force_authenticate(admin_user)
    corrected = admin.post(f"/api/v1/prices/{line.pk}/correct/", {"price": "2.5"}, format="json")
    assert corrected.status_code == 200 and corrected.json()["price"] == "2.5000"
    early = admin.post(f"/api/v1/prices/{line.pk}/end/", {"valid_until": "2025-01-01"})
    assert early.status_code == 400 and "valid_until" in early.json()
    bad = admin.post(f"/api/v1/prices/{line.pk}/end/", {"valid_until": "soon"})
    assert bad.status_code == 400
    ended = admin.post(f"/api/v1/prices/{line.pk}/end/", {"valid_until": "2026-02-28"})
    assert ended.status_code == 200 and ended.json()["valid_until"] == "2026-02-28"
    assert (
        admin.post("/api/v1/prices/999999/end/", {"valid_until": "2026-02-28"}).status_code == 404
    )
    assert [e.data["action"] for e in price_events("corrected") + price_events("ended")] == [
        "corrected",
        "ended",
    ]


def test_the_console_prices_page(admin_user, make_user):
    admin = Client()
    admin.force_login(admin_user)
    assert Client().get("/console/prices/").status_code in (302, 404)
    student = Client()
    student.force_login(make_user("student"))
    assert student.get("/console/prices/").status_code == 404
    form = {"slice_kind": "share", "profile": "", "unit": "gpu_hour", "price": "25"}
    form |= {"currency": "CHF", "valid_from": "2026-01-01", "valid_until": "", "note": "typo"}
    assert admin.post("/console/prices/", form).status_code == 302
    line = PriceRule.objects.get()
    refused = admin.post("/console/prices/", {**form, "valid_from": "2026-02-01"})
    assert refused.status_code == 400 and "already valid from" in refused.content.decode()
    page = admin.get("/console/prices/").content.decode()
    assert f'id="price-{line.pk}"' in page and 'href="/console/prices/"' in page
    correct = f"/console/prices/{line.pk}/"
    wrong = admin.post(correct, {"price": "abc", "currency": "CHF", "valid_from": "2026-01-01"})
    assert wrong.status_code == 400 and "Enter a price, such as 2.50." in wrong.content.decode()
    fixed = {"price": "2.5", "currency": "CHF", "valid_from": "2026-01-01", "note": "fixed"}
    places = admin.post(correct, {**fixed, "price": "2.12345"})
    assert places.status_code == 400 and "at most 4 digits after" in places.content.decode()
    arabic = admin.post(correct, {**fixed, "price": "٢"})
    assert arabic.status_code == 400
    assert admin.post(correct, fixed).status_code == 302
    line.refresh_from_db()
    assert (line.price, line.note) == (Decimal("2.5000"), "fixed")
    end = f"/console/prices/{line.pk}/end/"
    early = admin.post(end, {f"end-{line.pk}-valid_until": "2025-06-30"})
    assert early.status_code == 400 and "before its first day" in early.content.decode()
    assert admin.post(end, {f"end-{line.pk}-valid_until": "2026-06-30"}).status_code == 302
    line.refresh_from_db()
    assert line.valid_until == date(2026, 6, 30)
    assert {
        e.data["action"] for e in AuditEvent.objects.filter(kind=AuditKind.USAGE_PRICES_CHANGED)
    } == {
        "added",
        "corrected",
        "ended",
    }
    closed = admin.post(
        "/console/reports/close/", {"close-start": "2026-01-01", "close-end": "2026-01-31"}
    )
    assert closed.status_code == 302 and ClosedReport.objects.count() == 1
    twice = admin.post(
        "/console/reports/close/", {"close-start": "2026-01-01", "close-end": "2026-01-31"}
    )
    assert twice.status_code == 400 and "closed already" in twice.content.decode()
