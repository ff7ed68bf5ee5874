"""The console's alerts, reports and audit pages: admins only (404 for everyone else),
acknowledging and resolving through the services (audited), rule validation, report numbers
and CSV equal to accounting's, the audit search and its CSV, and the live fragment."""

from __future__ import annotations

import csv
import io
import re
from datetime import date, datetime, timedelta
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest
from django.test import Client
from django.utils import timezone
from guardian.shortcuts import assign_perm

from people.models import Course, Member
from portal.console import audit_search
from scheduling.choices import AuditKind
from scheduling.models import Alert, AlertRule, AuditEvent, UsageRecord
from scheduling.rules import pricing
from scheduling.services.accounting import (
    check_price,
    do_price,
    report_csv,
    row_fields,
    usage_report,
)
from scheduling.services.alert_changes import check_rule, do_save_rule
from scheduling.services.alerts import evaluate_alerts
from scheduling.services.audit import record

pytestmark = pytest.mark.django_db

PAGES = ["/console/alerts/", "/console/reports/", "/console/audit/", "/console/alerts/fragment/"]


def client_for(user=None) -> Client:
    client = Client()
    if user is not None:
        client.force_login(user)
    return client


@pytest.fixture
def admin(admin_user) -> Client:
    return client_for(admin_user)


@pytest.fixture
def queue_rule(admin_user) -> AlertRule:
    """A rule that fires on an empty queue: waiting requests >= 0."""
    change = check_rule(
        admin_user,
        {"name": "Any queue", "metric": "queue_length", "scope": "pool", "warning": 0},
    )
    return do_save_rule(admin_user, change)


@pytest.fixture
def firing(queue_rule) -> Alert:
    raised = evaluate_alerts().raised
    assert len(raised) == 1
    return Alert.objects.get(pk=raised[0])


def test_every_page_is_for_admins_only(owner, make_user, admin, queue_rule, firing):
    course = Course.objects.create(code="cs101", title="Lab", department="cs")
    teacher = make_user("ines")
    course.instructors.add(teacher)
    ta = make_user("tom")
    for perm in ("view_live_class", "manage_class_desktops", "answer_quota_requests"):
        assign_perm(f"portal.{perm}", ta, course)
    rule_page = f"/console/alerts/rules/{queue_rule.pk}/"
    for page in [*PAGES, rule_page, "/console/alerts/rules/new/"]:
        assert admin.get(page).status_code == 200, page
        for person in (None, owner, teacher, ta):
            assert client_for(person).get(page).status_code == 404, (page, person)
    for action in ("acknowledge", "resolve"):
        for person in (None, owner, teacher, ta):
            answer = client_for(person).post(f"/console/alerts/{firing.pk}/{action}/")
            assert answer.status_code == 404
    assert client_for(ta).post(rule_page, {"name": "x"}).status_code == 404
    firing.refresh_from_db()
    assert firing.state == "firing"
    nav = admin.get("/console/").content.decode()
    for page in PAGES[:3]:
        assert f'href="{page}"' in nav


def test_acknowledge_then_resolve_through_the_page_is_audited(admin, admin_user, firing):
    page = admin.get("/console/alerts/").content.decode()
    assert f'data-alert-id="{firing.pk}"' in page and "Any queue" in page

    answer = admin.post(f"/console/alerts/{firing.pk}/acknowledge/", follow=True)
    assert answer.status_code == 200
    firing.refresh_from_db()
    assert (firing.state, firing.acknowledged_by) == ("acknowledged", admin_user)
    acked = AuditEvent.objects.get(kind=AuditKind.ALERT_ACKNOWLEDGED)
    assert acked.actor == "user:root" and acked.data["alert"] == firing.pk
    assert acked.address == "127.0.0.1"

    # Acknowledging twice changes nothing and says why.
    again = admin.post(f"/console/alerts/{firing.pk}/acknowledge/", follow=True)
    assert "already acknowledged" in again.content.decode()
    assert AuditEvent.objects.filter(kind=AuditKind.ALERT_ACKNOWLEDGED).count() == 1

    admin.post(f"/console/alerts/{firing.pk}/resolve/")
    firing.refresh_from_db()
    assert (firing.state, firing.resolved_by) == ("resolved", admin_user)
    resolved = AuditEvent.objects.get(kind=AuditKind.ALERT_RESOLVED)
    assert resolved.data["by"] == "person"
    page = admin.get("/console/alerts/").content.decode()
    assert 'id="no-open-alerts"' in page
    assert re.search(rf'id="resolved-alerts".*data-alert-id="{firing.pk}"', page, re.S)
    assert admin.post("/console/alerts/999999/resolve/").status_code == 404
    assert admin.get(f"/console/alerts/{firing.pk}/resolve/").status_code == 405


def test_the_rule_form_shows_the_services_refusal_next_to_the_field(admin, queue_rule):
    url = f"/console/alerts/rules/{queue_rule.pk}/"
    form = {"name": "Any queue", "metric": "queue_length", "scope": "pool"}
    form |= {"warning": "10", "critical": "5", "sustained_minutes": "0", "enabled": "on"}
    answer = admin.post(url, form)
    assert answer.status_code == 400
    html = answer.content.decode()
    critical = re.search(r'<div class="field has-error">(.*?)</div>\s*<div', html, re.S)
    assert critical and 'name="critical"' in critical.group(1)
    assert "The critical level must be above the warning level." in critical.group(1)
    assert AuditEvent.objects.filter(kind=AuditKind.ALERT_RULE_CHANGED).count() == 1  # made
    queue_rule.refresh_from_db()
    assert (queue_rule.warning, queue_rule.critical) == (0, None)

    bad_number = admin.post(url, {**form, "warning": "ten"})
    assert bad_number.status_code == 400
    assert "Enter a number, such as 80" in bad_number.content.decode()
    wrong_scope = admin.post(url, {**form, "critical": "20", "scope": "gpu"})
    assert wrong_scope.status_code == 400 and "can be watched per" in wrong_scope.content.decode()

    saved = admin.post(url, {**form, "critical": "20", "extra_recipients": "ops@example.edu"})
    assert saved.status_code == 302
    queue_rule.refresh_from_db()
    assert (queue_rule.warning, queue_rule.critical) == (10, 20)
    assert queue_rule.extra_recipients == ["ops@example.edu"]
    change = AuditEvent.objects.filter(kind=AuditKind.ALERT_RULE_CHANGED).latest("pk")
    assert change.data["before"]["critical"] is None and change.data["after"]["critical"] == 20

    new = admin.post("/console/alerts/rules/new/", {**form, "name": "", "critical": "20"})
    assert new.status_code == 400 and AlertRule.objects.count() == 1


def usage(user, started, hours, department, course, share=0.5):
    gpu_hours = pricing.held_hours(share, Decimal(hours))
    return UsageRecord.objects.create(
        user=user,
        username=user.username,
        department=department,
        course_code=course,
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
        idle_gpu_hours=Decimal("0.1"),
    )


def test_report_numbers_and_csv_are_accountings(admin, admin_user, make_user):
    ada, ben = make_user("ada"), make_user("ben")
    monday = timezone.make_aware(datetime(2026, 3, 2, 10, 0))
    usage(ada, monday, 2, "Physics", "ph1")
    usage(ada, monday + timedelta(days=7), 1, "Physics", "ph1")
    usage(ben, monday + timedelta(days=1), 4, "Maths", "ma1")
    do_price(
        admin_user,
        check_price(
            slice_kind="share",
            profile="",
            unit="gpu_hour",
            price=Decimal("1.50"),
            currency="CHF",
            valid_from=date(2026, 1, 1),
            valid_until=None,
        ),
    )
    query = "group=department&period=week&start=2026-03-01&end=2026-03-31"
    page = admin.get(f"/console/reports/?{query}")
    assert page.status_code == 200
    html = page.content.decode()
    expected = usage_report("department", "week", date(2026, 3, 1), date(2026, 3, 31))
    assert len(expected) == 3
    shown = re.findall(
        r'<tr data-key="([^"]*)" data-period="([^"]*)">.*?data-field="gpu_hours">([^<]*)<'
        r'.*?data-field="cost">([^<]*)<',
        html,
        re.S,
    )
    assert shown == [
        (r.key, r.period_start.isoformat(), str(r.gpu_hours), f"{r.cost} CHF") for r in expected
    ]
    assert html.count('<rect class="bar" x=') == 3 and "<svg" in html
    total = sum(r.gpu_hours for r in expected)
    assert re.search(rf'id="report-totals".*?data-field="gpu_hours">{total}<', html, re.S)

    exported = admin.get(f"/console/reports/?{query}&format=csv")
    assert exported["Content-Type"].startswith("text/csv")
    assert "attachment" in exported["Content-Disposition"]
    assert exported.content.decode() == report_csv(row_fields(r) for r in expected)
    api = admin.get(f"/api/v1/usage/report/?{query}&format=csv")
    assert exported.content == api.content
    assert 'id="report-csv"' in html and "format=csv" in html

    backwards = admin.get(
        "/console/reports/?group=user&period=month&start=2026-03-31&end=2026-03-01"
    )
    assert backwards.status_code == 400
    assert "The end date cannot be before the start date." in backwards.content.decode()
    assert admin.get("/console/reports/?period=year").status_code == 400
    assert admin.get("/console/reports/").status_code == 200  # the last eight weeks


@pytest.fixture
def events(admin_user):
    """Events of several kinds, actors, sessions and nodes; the session and node ids name
    rows that do not exist (deleted ones keep their ids in the audit)."""
    at = timezone.make_aware(datetime(2026, 3, 1, 17, 0), ZoneInfo("UTC"))  # 3-2 01:00 Shanghai
    return {
        "quota": record(AuditKind.ALERT_RULE_CHANGED, "user:root",
                        data={"note": "Raised the Physics limit"}, at=at),
        "sess": record(AuditKind.ALERT_RAISED, "alerts", session=4242,
                       data={"subject": "pool"}, at=at - timedelta(days=3)),
        "node": record(AuditKind.ALERT_RESOLVED, "user:ines", node=77,
                       data={"subject": "node:gpu-a01"}, at=at + timedelta(days=3)),
    }  # fmt: skip


def ids(answer) -> list[int]:
    return [int(x) for x in re.findall(r'data-event-id="(\d+)"', answer.content.decode())]


def test_the_audit_search_filters_by_who_what_when_session_node_and_text(admin, admin_user, events):
    Member.objects.update_or_create(user=admin_user, defaults={"time_zone": "Asia/Shanghai"})
    quota, sess, node = events["quota"].pk, events["sess"].pk, events["node"].pk
    assert ids(admin.get("/console/audit/")) == [node, quota, sess]  # newest first
    assert ids(admin.get("/console/audit/?actor=ines")) == [node]
    assert ids(admin.get(f"/console/audit/?kind={AuditKind.ALERT_RAISED}")) == [sess]
    # 17:00 UTC on 1 March is 01:00 on 2 March in the viewer's zone.
    assert ids(admin.get("/console/audit/?since=2026-03-02&until=2026-03-02")) == [quota]
    assert ids(admin.get("/console/audit/?until=2026-03-01")) == [sess]
    assert ids(admin.get("/console/audit/?session=4242")) == [sess]
    assert ids(admin.get("/console/audit/?node=77")) == [node]
    assert ids(admin.get("/console/audit/?text=physics")) == [quota]
    assert ids(admin.get("/console/audit/?text=gpu-a01&actor=user:")) == [node]
    page = admin.get("/console/audit/?session=4242").content.decode()
    assert "#4242" in page
    bad = admin.get("/console/audit/?since=2026-03-05&until=2026-03-01&session=x")
    assert bad.status_code == 400
    text = bad.content.decode()
    assert "Enter a session&#x27;s number" in text or "Enter a session's number" in text
    assert "The last day cannot be before the first day." in text
    assert AuditEvent.objects.count() == 3  # the page only reads


def test_audit_pages_of_fifty_and_the_csv_of_the_search(admin, events, monkeypatch):
    start = timezone.now() - timedelta(days=1)
    for i in range(52):
        record(AuditKind.ALERT_RAISED, "bulk", data={"i": i}, at=start + timedelta(minutes=i))
    first = admin.get("/console/audit/?actor=bulk")
    assert len(ids(first)) == 50 and "page=2" in first.content.decode()
    assert len(ids(admin.get("/console/audit/?actor=bulk&page=2"))) == 2

    exported = admin.get("/console/audit/?actor=bulk&format=csv")
    assert exported.streaming and exported["Content-Type"].startswith("text/csv")
    lines = list(csv.reader(io.StringIO(b"".join(exported.streaming_content).decode())))
    assert lines[0] == list(audit_search.CSV_COLUMNS)
    assert [line[6] for line in lines[1:3]] == ['{"i": 51}', '{"i": 50}']
    assert len(lines) == 53 and {line[2] for line in lines[1:]} == {"bulk"}

    monkeypatch.setattr(audit_search, "EXPORT_CAP", 5)
    cut = admin.get("/console/audit/?actor=bulk&format=csv")
    lines = list(csv.reader(io.StringIO(b"".join(cut.streaming_content).decode())))
    assert len(lines) == 1 + 5 + 1 and "Cut at 5 rows" in lines[-1][2]
    node = admin.get("/console/audit/?node=77&format=csv")
    rows = list(csv.reader(io.StringIO(b"".join(node.streaming_content).decode())))
    assert [r[4] for r in rows[1:]] == ["77"]


def test_the_audit_csv_quotes_a_cell_that_starts_like_a_formula(admin):
    record(AuditKind.ALERT_RAISED, '=HYPERLINK("http://evil.example/","Click")', data={})
    exported = admin.get("/console/audit/?format=csv")
    lines = list(csv.reader(io.StringIO(b"".join(exported.streaming_content).decode())))
    assert lines[1][2] == '\'=HYPERLINK("http://evil.example/","Click")'


def test_the_live_fragment_is_the_pages_alerts_section(admin, owner, firing):
    page = admin.get("/console/alerts/").content.decode()
    assert '"fragment_url": "/console/alerts/fragment/"' in page
    assert '"updates_path": "/ws/updates/"' in page and "console_ops.js" in page
    fragment = admin.get("/console/alerts/fragment/").content.decode()
    assert fragment.startswith('<div id="alerts-fragment">')

    def tokenless(html: str) -> str:
        return re.sub(r'name="csrfmiddlewaretoken" value="[^"]*"', "", html)

    assert tokenless(fragment).strip() in tokenless(page)  # one template for both
    assert f'data-alert-id="{firing.pk}" data-state="firing"' in fragment
    assert client_for(owner).get("/console/alerts/fragment/").status_code == 404


def test_the_pages_speak_chinese_to_a_chinese_admin(admin, admin_user, firing):
    Member.objects.update_or_create(user=admin_user, defaults={"language": "zh-hans"})
    for url in PAGES[:3]:
        html = admin.get(url).content.decode()
        assert '<html lang="zh-hans">' in html, url


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("language", "words"),
    [
        ("en", ["Desktop opened", "Node address changed"]),
        ("zh-hans", ["桌面已打开", "节点地址已变更"]),
    ],
)
def test_the_console_audit_log_names_desktop_opens_and_address_changes_in_words(
    admin_user, language, words
):
    Member.objects.create(user=admin_user, language=language, time_zone="UTC")
    record(AuditKind.DESKTOP_OPENED, "user:root", data={"viewer": "root", "as": "admin"})
    record(
        AuditKind.NODE_ADDRESS_CHANGED, "node:gpu-a", data={"old": "10.0.0.5", "new": "10.0.0.6"}
    )
    browser = Client()
    browser.force_login(admin_user)
    page = browser.get("/console/audit/").content.decode()
    assert all(word in page for word in words)
