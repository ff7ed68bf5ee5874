"""The console's quota and desktop profile pages: admins only; validation errors next to the
field; the current use beside each limit; create, edit, delete or deactivate, each audited
with before and after; a CPU-only profile saves in the console and in the Django admin."""

from __future__ import annotations

import pytest
from django.test import Client

from people.models import Course
from scheduling.choices import AuditKind, SessionState
from scheduling.models import AuditEvent, DesktopProfile, Quota
from scheduling.models.policy import PoolPolicy
from scheduling.services.cycle import do_scheduling_cycle
from scheduling.services.home_files import MB, quota_bytes_of
from scheduling.services.sessions import check_submit, do_submit
from tests.conftest import TEST_IMAGE

pytestmark = pytest.mark.django_db

QUOTA = {"scope": "user", "key": "ada", "max_sessions": "2", "max_gpu_hours_week": "10"}
CPU_ONLY = {
    "slug": "terminal",
    "name": "Terminal",
    "image": TEST_IMAGE,
    "cpus": "1",
    "memory_mb": "1024",
    "gpu_count": "0",
    "gpu_memory_min_mb": "0",
    "max_duration_minutes": "120",
    "active": "on",
}


def logged_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def field_error(html: str, field: str) -> str:
    """The error shown next to a field (the span the template puts after its label)."""
    marker = f'id="id_{field}_error">'
    assert marker in html, f"no error next to {field}"
    return html.split(marker)[1].split("</span>")[0]


def policy_events(model: str) -> list[AuditEvent]:
    return list(
        AuditEvent.objects.filter(kind=AuditKind.POLICY_CHANGED, data__model=model).order_by("pk")
    )


@pytest.mark.parametrize(
    "url",
    [
        "/console/quotas/",
        "/console/profiles/",
    ],
)
def test_the_pages_are_404_for_everyone_but_admins(url, owner):
    assert Client().get(url).status_code == 404
    assert logged_in(owner).get(url).status_code == 404
    assert logged_in(owner).post(url, QUOTA).status_code == 404
    assert not Quota.objects.exists() and not DesktopProfile.objects.exists()


def test_edit_delete_and_deactivate_are_404_for_non_admins(owner, profile):
    quota = Quota.objects.create(scope="user", key="*", max_sessions=1)
    student = logged_in(owner)
    assert student.get(f"/console/quotas/{quota.pk}/").status_code == 404
    assert student.post(f"/console/quotas/{quota.pk}/delete/").status_code == 404
    assert student.get(f"/console/profiles/{profile.pk}/").status_code == 404
    assert student.post(f"/console/profiles/{profile.pk}/deactivate/").status_code == 404
    assert Quota.objects.filter(pk=quota.pk).exists()
    profile.refresh_from_db()
    assert profile.active


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        ({"key": "nobody"}, "key", "No user is called nobody"),
        ({"scope": "course", "key": "cs999"}, "key", "No course has the code cs999"),
        ({"max_sessions": "-1"}, "max_sessions", "0 or more"),
        ({"max_gpu_hours_week": "-0.5"}, "max_gpu_hours_week", "0 or more"),
        ({"max_gpu_hours_week": "lots"}, "max_gpu_hours_week", "Enter a number"),
        ({"key": ""}, "key", "Say who the quota is for"),
    ],
)
def test_a_quota_is_refused_with_the_error_next_to_its_field(
    admin_user, owner, change, field, words
):
    page = logged_in(admin_user).post("/console/quotas/", {**QUOTA, **change})
    assert page.status_code == 400
    assert words in field_error(page.content.decode(), field)
    assert not Quota.objects.exists()
    assert not policy_events("quota")


def test_a_second_quota_for_the_same_key_is_refused(admin_user, owner):
    Quota.objects.create(scope="user", key="ada", max_sessions=1)
    page = logged_in(admin_user).post("/console/quotas/", QUOTA)
    assert page.status_code == 400
    assert "already" in field_error(page.content.decode(), "key")
    assert Quota.objects.count() == 1


def test_defaults_and_courses_are_accepted_keys(admin_user):
    Course.objects.create(code="cs101", title="Intro")
    client = logged_in(admin_user)
    assert client.post("/console/quotas/", {"scope": "course", "key": "cs101"}).status_code == 302
    assert client.post("/console/quotas/", {"scope": "user", "key": "*"}).status_code == 302
    reply = client.post("/console/quotas/", {"scope": "department", "key": "Physics"})
    assert reply.status_code == 302
    assert Quota.objects.count() == 3


def test_quota_create_edit_delete_are_audited_with_before_and_after(admin_user, owner):
    client = logged_in(admin_user)
    assert client.post("/console/quotas/", QUOTA).status_code == 302
    quota = Quota.objects.get(scope="user", key="ada")
    assert quota.max_sessions == 2 and quota.max_gpu_hours_week == 10
    edit = {**QUOTA, "max_sessions": "3", "max_gpu_hours_week": ""}
    assert client.post(f"/console/quotas/{quota.pk}/", edit).status_code == 302
    quota.refresh_from_db()
    assert quota.max_sessions == 3 and quota.max_gpu_hours_week is None
    assert client.post(f"/console/quotas/{quota.pk}/delete/", {"confirmed": "1"}).status_code == 302
    assert not Quota.objects.exists()
    created, changed, deleted = policy_events("quota")
    assert [e.data["action"] for e in (created, changed, deleted)] == [
        "created",
        "changed",
        "deleted",
    ]
    assert all(e.actor == "user:root" for e in (created, changed, deleted))
    assert created.data["before"] is None and created.data["after"]["max_sessions"] == 2
    assert changed.data["before"]["max_sessions"] == 2
    assert changed.data["after"]["max_sessions"] == 3
    assert changed.data["after"]["max_gpu_hours_week"] is None
    assert deleted.data["before"]["max_sessions"] == 3 and deleted.data["after"] is None


def test_the_current_use_is_shown_beside_each_limit(admin_user, owner, profile, pool):
    quota = Quota.objects.create(scope="user", key="ada", max_sessions=2, max_gpu_hours_week=5)
    Quota.objects.create(scope="user", key="*", max_sessions=1)
    do_submit(owner, check_submit(owner, profile.pk, "hobby", None))
    do_scheduling_cycle()
    assert owner.desktop_sessions.get().state == SessionState.PLACED
    page = logged_in(admin_user).get("/console/quotas/")
    assert page.status_code == 200
    html = page.content.decode()
    row = html.split(f'id="quota-{quota.pk}"')[1].split("</tr>")[0]
    sessions = row.split('class="quota-sessions">')[1].split("</td>")[0]
    assert sessions == "1 of 2 desktops"
    hours = row.split('class="quota-hours">')[1].split("</td>")[0]
    assert hours.endswith(" of 5 GPU-hours"), hours
    assert "per member" in html  # the * default is counted per member


def test_a_cpu_only_profile_saves_in_the_console_and_is_audited(admin_user):
    client = logged_in(admin_user)
    reply = client.post("/console/profiles/", CPU_ONLY)
    assert reply.status_code == 302, reply.content.decode()[:2000]
    saved = DesktopProfile.objects.get(slug="terminal")
    assert saved.gpu_count == 0 and saved.allowed_kinds == [] and saved.active
    (created,) = policy_events("desktopprofile")
    assert created.data["action"] == "created" and created.data["before"] is None
    assert created.data["after"]["allowed_kinds"] == []
    edit = {**CPU_ONLY, "cpus": "2", "name": "Terminal plus"}
    assert client.post(f"/console/profiles/{saved.pk}/", edit).status_code == 302
    saved.refresh_from_db()
    assert saved.cpus == 2 and saved.name == "Terminal plus"
    assert client.post(f"/console/profiles/{saved.pk}/deactivate/").status_code == 302
    saved.refresh_from_db()
    assert not saved.active
    _, changed, deactivated = policy_events("desktopprofile")
    assert changed.data["before"]["cpus"] == 1 and changed.data["after"]["cpus"] == 2
    assert deactivated.data["action"] == "deactivated"
    assert deactivated.data["after"] == {"active": False}


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        ({"image": ""}, "image", "container image"),
        ({"cpus": "0"}, "cpus", "more than 0 CPUs"),
        ({"memory_mb": "0"}, "memory_mb", "more than 0 MB"),
        ({"allowed_kinds": ["mig"]}, "allowed_kinds", "CPU-only"),
        ({"gpu_memory_min_mb": "4000"}, "gpu_memory_min_mb", "CPU-only"),
        ({"gpu_count": "1"}, "allowed_kinds", "at least one slice kind"),
        ({"gpu_count": "1", "allowed_kinds": ["tpu"]}, "allowed_kinds", "tpu"),
        ({"slug": "painting"}, "slug", "already"),
    ],
)
def test_a_profile_is_refused_with_the_error_next_to_its_field(
    admin_user, profile, change, field, words
):
    page = logged_in(admin_user).post("/console/profiles/", {**CPU_ONLY, **change})
    assert page.status_code == 400
    assert words in field_error(page.content.decode(), field)
    assert DesktopProfile.objects.count() == 1
    assert not policy_events("desktopprofile")


def test_a_cpu_only_profile_saves_in_the_django_admin(admin_user):
    """It used to fail: the admin's form required ``allowed_kinds`` and refused ``[]``."""
    client = logged_in(admin_user)
    form = {
        **CPU_ONLY,
        "description": "",
        "pids_limit": "256",
        "shm_mb": "64",
        "compute_min": "0",
        "gpu_models": "[]",
        "allowed_kinds": "[]",
    }
    reply = client.post("/admin/scheduling/desktopprofile/add/", form)
    assert reply.status_code == 302, reply.content.decode()[:3000]
    saved = DesktopProfile.objects.get(slug="terminal")
    assert saved.gpu_count == 0 and saved.allowed_kinds == []
    (created,) = policy_events("desktopprofile")
    assert created.actor == "user:root" and created.data["action"] == "created"


def test_the_django_admin_refuses_what_the_console_refuses(admin_user):
    form = {
        **CPU_ONLY,
        "pids_limit": "256",
        "shm_mb": "64",
        "compute_min": "0",
        "gpu_models": "[]",
        "allowed_kinds": '["mig"]',
    }
    reply = logged_in(admin_user).post("/admin/scheduling/desktopprofile/add/", form)
    assert reply.status_code == 200
    assert "CPU-only profile (0 GPUs) takes no slice" in reply.content.decode()
    assert not DesktopProfile.objects.exists()


def test_the_django_admin_saves_quotas_through_the_same_service(admin_user, owner):
    client = logged_in(admin_user)
    reply = client.post(
        "/admin/scheduling/quota/add/",
        {"scope": "user", "key": "ada", "max_sessions": "1"},
    )
    assert reply.status_code == 302
    (created,) = policy_events("quota")
    assert created.data["action"] == "created" and created.data["after"]["key"] == "ada"
    refused = client.post("/admin/scheduling/quota/add/", {"scope": "user", "key": "nobody"})
    assert refused.status_code == 200 and "No user is called nobody" in refused.content.decode()


def test_the_pages_render_in_chinese_at_the_viewers_request(admin_user):
    client = logged_in(admin_user)
    for url in ("/console/quotas/", "/console/profiles/"):
        page = client.get(url, HTTP_ACCEPT_LANGUAGE="zh-hans")
        assert page.status_code == 200
        assert 'lang="zh-hans"' in page.content.decode()


def test_the_django_admin_deletes_only_an_unused_profile_and_audits_it(admin_user, owner, profile):
    unused = DesktopProfile.objects.create(slug="spare", name="Spare", image=TEST_IMAGE)
    client = logged_in(admin_user)
    url = "/admin/scheduling/desktopprofile/{}/delete/"
    assert client.post(url.format(unused.pk), {"post": "yes"}).status_code == 302
    assert not DesktopProfile.objects.filter(pk=unused.pk).exists()
    (deleted,) = policy_events("desktopprofile")
    assert deleted.data["action"] == "deleted" and deleted.data["before"]["slug"] == "spare"
    do_submit(owner, check_submit(owner, profile.pk, "hobby", None))
    refused = client.post(url.format(profile.pk), {"post": "yes"})
    assert refused.status_code == 200  # the admin lists what protects it
    assert DesktopProfile.objects.filter(pk=profile.pk).exists()
    assert len(policy_events("desktopprofile")) == 1


def test_a_home_folder_quota_is_set_per_person_in_the_console_and_the_admin(admin_user, owner):
    """Quota.max_home_mb (issue 27): edited with the other limits, shown in the table, kept
    off course and department quotas, and what the Files page counts for that person."""
    client = logged_in(admin_user)
    assert client.post("/console/quotas/", {**QUOTA, "max_home_mb": "2048"}).status_code == 302
    quota = Quota.objects.get(key="ada")
    assert quota.max_home_mb == 2048 and quota_bytes_of(owner) == 2048 * MB
    (created,) = policy_events("quota")
    assert created.data["after"]["max_home_mb"] == 2048
    assert "2048 MB" in client.get("/console/quotas/").content.decode()
    edit = client.get(f"/console/quotas/{quota.pk}/").content.decode()
    assert 'name="max_home_mb"' in edit and 'value="2048"' in edit
    course = client.post("/console/quotas/", {"scope": "department", "key": "Physics",
                                              "max_home_mb": "10"})  # fmt: skip
    assert course.status_code == 400
    assert "set its size on a user quota" in field_error(course.content.decode(), "max_home_mb")
    reply = client.post(
        f"/admin/scheduling/quota/{quota.pk}/change/",
        {"scope": "user", "key": "ada", "max_home_mb": "100"},
    )
    assert reply.status_code == 302
    assert quota_bytes_of(owner) == 100 * MB


def test_the_weekly_cap_on_granted_hours_is_set_on_the_quotas_page_and_audited(admin_user, owner):
    client = logged_in(admin_user)
    page = client.get("/console/quotas/").content.decode()
    assert 'name="max_granted_gpu_hours_week"' in page and 'value="100.0"' in page
    refused = client.post("/console/quotas/grant-cap/", {"max_granted_gpu_hours_week": "-1"})
    assert refused.status_code == 400
    assert "from 0 to" in field_error(refused.content.decode(), "max_granted_gpu_hours_week")
    saved = client.post("/console/quotas/grant-cap/", {"max_granted_gpu_hours_week": "24"})
    assert saved.status_code == 302
    assert PoolPolicy.current().max_granted_gpu_hours_week == 24
    [event] = policy_events("poolpolicy")
    assert event.actor == f"user:{admin_user.username}"
    assert event.data["before"] == {"max_granted_gpu_hours_week": 100.0}
    assert event.data["after"] == {"max_granted_gpu_hours_week": 24.0}
    assert (
        logged_in(owner)
        .post("/console/quotas/grant-cap/", {"max_granted_gpu_hours_week": "999"})
        .status_code
        == 404
    )
    assert PoolPolicy.current().max_granted_gpu_hours_week == 24
