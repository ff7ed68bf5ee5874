"""The accounting API: admins only, the report as JSON and CSV, price lines validated."""

from __future__ import annotations

import csv
import io
from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from scheduling.choices import AuditKind
from scheduling.models import AuditEvent, PriceRule, UsageRecord

pytestmark = pytest.mark.django_db

ENDPOINTS = (
    "/api/v1/usage/records/",
    "/api/v1/usage/report/?group=user&period=week&start=2026-03-01&end=2026-03-31",
    "/api/v1/prices/",
)


def client_for(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


@pytest.fixture
def records(owner, stranger):
    monday = timezone.make_aware(timezone.datetime(2026, 3, 2, 10, 0))
    for user, department, hours in ((owner, "Physics", 2), (stranger, "Maths", 3)):
        UsageRecord.objects.create(
            user=user,
            username=user.username,
            department=department,
            purpose="hobby",
            profile_slug="painting",
            slice_kind="share",
            gpu_share=0.5,
            compute_units=0.5,
            started_at=monday,
            ended_at=monday + timedelta(hours=hours),
            end_state="ENDED",
            gpu_hours=Decimal(hours) / 2,
            cu_hours=Decimal(hours) / 2,
        )


@pytest.mark.parametrize("url", ENDPOINTS)
def test_non_admins_get_403_on_every_accounting_endpoint(owner, url, records):
    assert client_for(owner).get(url).status_code == 403
    assert client_for(owner).post("/api/v1/prices/", {}, format="json").status_code == 403


def test_admins_list_records_with_filters(admin_user, records):
    answer = client_for(admin_user).get("/api/v1/usage/records/", {"department": "Maths"})
    assert answer.status_code == 200
    [only] = answer.json()
    assert (only["user"], only["gpu_hours"], only["end_state"]) == ("ben", "1.500000", "ENDED")
    bad = client_for(admin_user).get("/api/v1/usage/records/", {"since": "last tuesday"})
    assert bad.status_code == 400 and "since" in bad.json()


def test_the_report_is_json_or_csv_and_totals_match_the_records(admin_user, records):
    client = client_for(admin_user)
    query = {"group": "department", "period": "month", "start": "2026-03-01", "end": "2026-03-31"}

    rows = client.get("/api/v1/usage/report/", query).json()
    assert [(r["key"], r["gpu_hours"], r["period_start"]) for r in rows] == [
        ("Maths", "1.500000", "2026-03-01"),
        ("Physics", "1.000000", "2026-03-01"),
    ]
    as_csv = client.get("/api/v1/usage/report/", {**query, "format": "csv"})
    assert as_csv.status_code == 200 and as_csv["Content-Type"].startswith("text/csv")
    assert "attachment" in as_csv["Content-Disposition"]
    lines = as_csv.content.decode().splitlines()
    assert lines[0].startswith("group,key,period,period_start,runs,gpu_hours")
    assert lines[1].startswith("department,Maths,month,2026-03-01,1,1.500000")
    accepted = client.get("/api/v1/usage/report/", query, HTTP_ACCEPT="text/csv")
    assert accepted["Content-Type"].startswith("text/csv")
    assert accepted.content.decode().splitlines() == lines


def test_a_bad_report_query_is_a_400_naming_the_field(admin_user):
    client = client_for(admin_user)
    wrong_group = client.get(
        "/api/v1/usage/report/",
        {"group": "team", "period": "week", "start": "2026-03-01", "end": "2026-03-31"},
    )
    assert wrong_group.status_code == 400 and "group" in wrong_group.json()
    backwards = client.get(
        "/api/v1/usage/report/",
        {"group": "user", "period": "week", "start": "2026-03-31", "end": "2026-03-01"},
    )
    assert backwards.status_code == 400 and "end" in backwards.json()


def test_admins_add_price_lines_and_an_overlap_is_a_400_with_nothing_created(admin_user, profile):
    client = client_for(admin_user)
    line = {
        "slice_kind": "mig",
        "profile": "painting",
        "unit": "gpu_hour",
        "price": "2.50",
        "currency": "CHF",
        "valid_from": "2026-01-01",
        "valid_until": "2026-06-30",
    }
    made = client.post("/api/v1/prices/", line, format="json")
    assert made.status_code == 201, made.json()
    assert (made.json()["profile"], made.json()["price"]) == ("painting", "2.5000")
    assert AuditEvent.objects.filter(kind=AuditKind.USAGE_PRICES_CHANGED).count() == 1

    overlap = client.post("/api/v1/prices/", {**line, "valid_from": "2026-06-01"}, format="json")
    assert overlap.status_code == 400 and "valid_from" in overlap.json()
    negative = client.post(
        "/api/v1/prices/", {**line, "price": "-1", "valid_from": "2027-01-01"}, format="json"
    )
    assert negative.status_code == 400 and "price" in negative.json()
    unknown = client.post("/api/v1/prices/", {**line, "unit": "per-seat"}, format="json")
    assert unknown.status_code == 400 and "unit" in unknown.json()
    assert PriceRule.objects.count() == 1
    assert len(client.get("/api/v1/prices/").json()) == 1


def test_a_report_cell_that_starts_like_a_formula_is_quoted_in_the_csv(admin_user, records):
    """OWASP CSV injection: a department (free text) named like a spreadsheet formula."""
    formula = '=HYPERLINK("http://evil.example/","Click")'
    UsageRecord.objects.filter(username="ada").update(department=formula)
    query = {"group": "department", "period": "month", "start": "2026-03-01", "end": "2026-03-31"}
    as_csv = client_for(admin_user).get("/api/v1/usage/report/", {**query, "format": "csv"})
    rows = list(csv.reader(io.StringIO(as_csv.content.decode())))
    assert [row[1] for row in rows[1:]] == ["'" + formula, "Maths"]
