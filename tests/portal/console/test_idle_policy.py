"""The console's idle pages (issue 15): the idle policy rows with the defaults, created,
edited and deleted by admins (waits in minutes, the end in hours), refused with the error
next to its field and nothing changed, every change audited with before and after, the same
check in the Django admin; the GPU idle allocated hours per course and department with a
period of 1 to 90 days. Everyone but an admin gets 404, as on every console page."""

from __future__ import annotations

from datetime import timedelta
from zoneinfo import ZoneInfo

import pytest
from django.test import Client
from django.utils import timezone

from people.models import Member
from scheduling.choices import AuditKind
from scheduling.models import AuditEvent, IdlePolicy, UsageRecord

pytestmark = [pytest.mark.django_db, pytest.mark.lifecycle]

POLICIES = "/console/idle/policies/"
HOURS = "/console/idle/hours/"
POLICY = {
    "profile": "",
    "purpose": "coursework",
    "enabled": "on",
    "idle_after": "5",
    "warn_after": "20",
    "suspend_after": "10",
    "end_after": "12",
    "gpu_idle_pct": "3",
    "cpu_idle_pct": "",
}


def logged_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def field_error(html: str, field: str) -> str:
    marker = f'id="id_{field}_error">'
    assert marker in html, f"no error next to {field}"
    return html.split(marker)[1].split("</span>")[0]


def policy_events() -> list[AuditEvent]:
    return list(
        AuditEvent.objects.filter(kind=AuditKind.POLICY_CHANGED, data__model="idlepolicy").order_by(
            "pk"
        )
    )


def test_the_pages_are_404_for_everyone_but_admins(owner, profile):
    policy = IdlePolicy.objects.create(profile=profile)
    for client in (Client(), logged_in(owner)):
        for url in ("/console/idle/", POLICIES, f"{POLICIES}{policy.pk}/", HOURS):
            assert client.get(url).status_code == 404
        assert client.post(POLICIES, POLICY).status_code == 404
        assert client.post(f"{POLICIES}{policy.pk}/", POLICY).status_code == 404
        assert client.post(f"{POLICIES}{policy.pk}/delete/").status_code == 404
    assert list(IdlePolicy.objects.values_list("pk", "purpose")) == [(policy.pk, "")]
    assert not policy_events()


def test_the_list_shows_the_rows_and_the_defaults(admin_user, profile):
    policy = IdlePolicy.objects.create(
        profile=profile, purpose="hobby", warn_after=timedelta(minutes=45), cpu_idle_pct=None
    )
    html = logged_in(admin_user).get(POLICIES).content.decode()
    row = html.split(f'id="idle-policy-{policy.pk}"')[1].split("</tr>")[0]
    assert profile.name in row and "Hobby" in row
    assert '<td data-field="warn_after">45</td>' in row
    assert "ignored" in row.split('data-field="cpu_idle_pct">')[1]
    defaults = html.split('id="idle-policy-defaults"')[1].split("</tr>")[0]
    assert '<td data-field="idle_after">10</td>' in defaults
    assert '<td data-field="warn_after">30</td>' in defaults
    assert '<td data-field="end_after">24</td>' in defaults
    assert '<td data-field="cpu_idle_pct">50</td>' in defaults
    # The idle page links its policies and hours.
    idle = logged_in(admin_user).get("/console/idle/").content.decode()
    assert f'href="{POLICIES}"' in idle and f'href="{HOURS}"' in idle


def test_create_edit_delete_are_audited_with_before_and_after(admin_user, profile):
    client = logged_in(admin_user)
    reply = client.post(POLICIES, POLICY)
    assert reply.status_code == 302, reply.content.decode()[:3000]
    policy = IdlePolicy.objects.get()
    assert policy.profile is None and policy.purpose == "coursework" and policy.enabled
    assert policy.idle_after == timedelta(minutes=5)
    assert policy.warn_after == timedelta(minutes=20)
    assert policy.suspend_after == timedelta(minutes=10)
    assert policy.end_after == timedelta(hours=12)
    assert policy.gpu_idle_pct == 3.0 and policy.cpu_idle_pct is None
    assert not policy.gpu_needs_viewer

    form = client.get(f"{POLICIES}{policy.pk}/").content.decode()
    assert 'name="warn_after" value="20"' in form and 'name="end_after" value="12"' in form
    edit = {**POLICY, "profile": str(profile.pk), "warn_after": "40", "end_after": "1.5"}
    edit.pop("enabled")  # unchecked: off
    assert client.post(f"{POLICIES}{policy.pk}/", edit).status_code == 302
    policy.refresh_from_db()
    assert policy.profile == profile and not policy.enabled
    assert policy.warn_after == timedelta(minutes=40) and policy.end_after == timedelta(minutes=90)

    assert client.get(f"{POLICIES}{policy.pk}/delete/").status_code == 405
    assert client.post(f"{POLICIES}{policy.pk}/delete/").status_code == 302
    assert not IdlePolicy.objects.exists()

    created, changed, deleted = policy_events()
    assert [e.data["action"] for e in (created, changed, deleted)] == [
        "created",
        "changed",
        "deleted",
    ]
    assert all(e.actor == "user:root" for e in (created, changed, deleted))
    assert created.data["before"] is None
    assert created.data["after"]["warn_after_minutes"] == 20
    assert changed.data["before"]["warn_after_minutes"] == 20
    assert changed.data["after"]["warn_after_minutes"] == 40
    assert (
        changed.data["before"]["profile"] == "" and changed.data["after"]["profile"] == "painting"
    )
    assert changed.data["before"]["enabled"] is True and changed.data["after"]["enabled"] is False
    assert changed.data["after"]["end_after_minutes"] == 90
    assert set(changed.data["changed"]) == {
        "profile",
        "enabled",
        "warn_after_minutes",
        "end_after_minutes",
    }
    assert deleted.data["before"]["warn_after_minutes"] == 40 and deleted.data["after"] is None


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        ({"idle_after": "0"}, "idle_after", "above 0"),
        ({"suspend_after": "-5"}, "suspend_after", "above 0"),
        ({"warn_after": "4"}, "warn_after", "at least 5 minutes"),
        ({"warn_after": "lots"}, "warn_after", "number of minutes"),
        ({"warn_after": "١٢"}, "warn_after", "number of minutes"),
        ({"end_after": ""}, "end_after", "number of hours"),
        ({"end_after": "1e999"}, "end_after", "number of hours"),
        ({"end_after": "721"}, "end_after", "at most 720 hours"),
        ({"idle_after": "20000"}, "idle_after", "at most 10080 minutes"),
        ({"gpu_idle_pct": "101"}, "gpu_idle_pct", "from 0 to 100"),
        ({"gpu_idle_pct": "-1"}, "gpu_idle_pct", "from 0 to 100"),
        ({"cpu_idle_pct": "150"}, "cpu_idle_pct", "from 0 to 100"),
        ({"purpose": "gaming"}, "purpose", "Choose a purpose"),
        ({"profile": "999999"}, "profile", "no longer exists"),
    ],
)
def test_bad_input_is_refused_next_to_its_field_and_changes_nothing(
    admin_user, profile, change, field, words
):
    page = logged_in(admin_user).post(POLICIES, {**POLICY, **change})
    assert page.status_code == 400
    assert words in field_error(page.content.decode(), field)
    assert not IdlePolicy.objects.exists()
    assert not policy_events()


def test_a_second_row_for_the_same_profile_and_purpose_is_refused(admin_user, profile):
    client = logged_in(admin_user)
    assert client.post(POLICIES, POLICY).status_code == 302
    page = client.post(POLICIES, {**POLICY, "warn_after": "60"})
    assert page.status_code == 400
    assert "already a policy" in field_error(page.content.decode(), "purpose")
    first = IdlePolicy.objects.get()
    # Editing a row into another's profile and purpose is refused too; the row is unchanged.
    other = IdlePolicy.objects.create(profile=profile, purpose="")
    page = client.post(f"{POLICIES}{other.pk}/", POLICY)
    assert page.status_code == 400
    assert "already a policy" in field_error(page.content.decode(), "purpose")
    other.refresh_from_db()
    assert other.profile == profile and other.purpose == ""
    assert first.warn_after == timedelta(minutes=20)
    assert len(policy_events()) == 1


def test_the_django_admin_checks_and_audits_the_same_way(admin_user):
    client = logged_in(admin_user)
    url = "/admin/scheduling/idlepolicy/add/"
    values = {
        "profile": "",
        "purpose": "hobby",
        "enabled": "on",
        "idle_after": "00:10:00",
        "warn_after": "00:05:00",  # before the idle time: refused
        "suspend_after": "00:15:00",
        "end_after": "1 00:00:00",
        "gpu_idle_pct": "5",
        "cpu_idle_pct": "50",
    }
    refused = client.post(url, values)
    assert refused.status_code == 200
    assert "The warning cannot come before" in refused.content.decode()
    assert not IdlePolicy.objects.exists()
    assert client.post(url, {**values, "warn_after": "00:30:00"}).status_code == 302
    (created,) = policy_events()
    assert created.data["action"] == "created" and created.data["after"]["purpose"] == "hobby"


def usage(course: str, department: str, hours: float, idle_hours: float) -> None:
    started = timezone.now() - timedelta(hours=hours + 1)
    UsageRecord.objects.create(
        username="ada",
        course_code=course,
        department=department,
        purpose="coursework",
        profile_slug="painting",
        started_at=started,
        ended_at=started + timedelta(hours=hours),
        gpu_share=1.0,
        gpu_hours=hours,
        gpu_idle_seconds=idle_hours * 3600,
    )


def test_the_hours_page_shows_courses_and_departments(admin_user):
    usage("ART101", "Arts", 4, 1)
    usage("CS200", "Computing", 2, 1.5)
    usage("", "Computing", 2, 0.5)
    page = logged_in(admin_user).get(HOURS)
    assert page.status_code == 200
    html = page.content.decode()
    courses = html.split('id="idle-courses"')[1].split("</table>")[0]
    art = courses.split('data-key="ART101"')[1].split("</tr>")[0]
    assert '<td data-field="gpu_hours">4.00</td>' in art
    assert '<td data-field="idle_gpu_hours">1.00</td>' in art
    assert '<td data-field="idle_pct">25.0 %</td>' in art
    assert 'data-key=""' not in courses
    departments = html.split('id="idle-departments"')[1].split("</table>")[0]
    computing = departments.split('data-key="Computing"')[1].split("</tr>")[0]
    assert '<td data-field="gpu_hours">4.00</td>' in computing
    assert '<td data-field="idle_pct">50.0 %</td>' in computing
    assert 'id="idle-hours-period"' in html


@pytest.mark.parametrize("days", ["0", "91", "abc", "٣", "-1", "1e3"])
def test_the_hours_period_is_checked(admin_user, days):
    page = logged_in(admin_user).get(HOURS, {"days": days})
    assert page.status_code == 400
    assert field_error(page.content.decode(), "days")


def test_a_shorter_period_leaves_older_runs_out(admin_user):
    usage("ART101", "Arts", 30, 3)  # started 31 hours ago
    client = logged_in(admin_user)
    assert 'data-key="ART101"' in client.get(HOURS, {"days": "2"}).content.decode()
    assert 'data-key="ART101"' not in client.get(HOURS, {"days": "1"}).content.decode()


def test_the_period_is_shown_in_the_admins_time_zone(admin_user):
    Member.objects.create(user=admin_user, time_zone="Asia/Shanghai")
    html = logged_in(admin_user).get(HOURS, {"days": "3"}).content.decode()
    period = html.split('id="idle-hours-period">')[1].split("</p>")[0]
    until = timezone.now().astimezone(ZoneInfo("Asia/Shanghai"))
    since = until - timedelta(days=3)
    # The minute may turn between the page and here: either reading is the page's.
    shown = {f"{moment:%Y-%m-%d %H:%M}" for moment in (since, since - timedelta(minutes=1))}
    assert any(f"from {text} to" in period for text in shown), period


def test_changes_need_the_csrf_token(admin_user, profile):
    policy = IdlePolicy.objects.create(profile=profile)
    client = Client(enforce_csrf_checks=True)
    client.force_login(admin_user)
    assert client.post(POLICIES, POLICY).status_code == 403
    assert client.post(f"{POLICIES}{policy.pk}/", POLICY).status_code == 403
    assert client.post(f"{POLICIES}{policy.pk}/delete/").status_code == 403
    assert list(IdlePolicy.objects.values_list("pk", flat=True)) == [policy.pk]
    assert not policy_events()
