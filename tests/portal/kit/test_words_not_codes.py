"""Codes become words, in both languages: audit event kinds and their details, GPU slices,
quota use with its units, the default alert rules' names, the reason's prefix and dates; and
the 404 and 500 pages are styled and translated (the 500 one without a database)."""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta

import pytest
from django.test import Client, RequestFactory
from django.utils import timezone, translation

from people.models import Course
from portal.server.overload import server_error
from scheduling.choices import AuditKind
from scheduling.models import Quota, Session
from scheduling.presenters import render
from scheduling.services.alerts import ensure_default_rules
from scheduling.services.audit import record
from scheduling.services.booking_series import check_series, do_create_series
from scheduling.services.cycle import do_scheduling_cycle
from scheduling.services.sessions import check_submit, do_submit

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _default_language_and_zone_after():
    yield
    translation.deactivate()
    timezone.deactivate()


def get(user, path: str, language: str = "zh-hans"):
    client = Client(HTTP_ACCEPT_LANGUAGE=language)
    if user is not None:
        client.force_login(user)
    return client.get(path)


def test_the_audit_log_labels_each_event_and_lists_its_details(admin_user):
    record(AuditKind.SESSION_SUBMITTED, "user:ada", data={"course": "cs101", "purpose": "hobby"})
    page = get(admin_user, "/console/audit/").content.decode()
    assert '<span class="audit-kind" title="session.submitted">申请桌面</span>' in page
    assert '<dt title="course">课程</dt><dd>cs101</dd>' in page
    assert '<dt title="purpose">Purpose</dt><dd>hobby</dd>' in page  # an unlabelled key
    results = page.split('id="audit-results"')[1].split("</section>")[0]
    assert "{&quot;" not in results and '{"' not in results  # no raw JSON
    english = get(admin_user, "/console/audit/", "en").content.decode()
    assert ">Desktop requested</span>" in english
    # The kind list of the search form reads in words too.
    assert '<option value="session.submitted">申请桌面</option>' in page


def test_a_sessions_slice_reads_as_words(owner, profile, pool):
    session = do_submit(owner, check_submit(owner, profile.pk, "hobby", None))
    do_scheduling_cycle()
    held = Session.objects.get(pk=session.pk).allocations.get().slice
    page = get(owner, f"/sessions/{session.pk}/").content.decode()
    code = f"gpu{held.gpu.index} {held.profile or held.kind}"
    words = (
        f"GPU {held.gpu.index} MIG {held.profile}"
        if held.profile
        else f"GPU {held.gpu.index} 时间片共享"
    )
    assert f'id="slice" title="{code}">{words}</span>' in page
    english = get(owner, f"/sessions/{session.pk}/", "en").content.decode()
    assert f">GPU {held.gpu.index}, " in english


def test_quota_use_is_said_with_its_units(admin_user):
    Quota.objects.create(scope="user", key="*", max_sessions=2, max_gpu_hours_week=None)
    quota = Quota.objects.create(scope="user", key="ada", max_gpu_hours_week=10)
    page = get(admin_user, "/console/quotas/", "en").content.decode()
    row = page.split(f'id="quota-{quota.pk}"')[1].split("</tr>")[0]
    assert "0 of 10 GPU-hours" in row and "∞" not in row and " / " not in row
    chinese = get(admin_user, "/console/quotas/").content.decode()
    assert "每人最多 2 个桌面" in chinese and "不限" in chinese


def test_the_default_alert_rules_are_named_in_the_readers_language(admin_user):
    ensure_default_rules()
    page = get(admin_user, "/console/alerts/").content.decode()
    assert "<td>GPU 温度</td>" in page and "<td>GPU temperature</td>" not in page


def test_a_held_request_and_a_later_start_read_as_words_and_chinese_dates():
    with translation.override("zh-hans"):
        text = render("quota_sessions", {"limit": 1})
        assert text.startswith("因配额暂缓：") and "blocked" not in text
        later = render(
            "waiting",
            {
                "tier": "hobby",
                "ahead": 1,
                "eta": datetime(2030, 3, 1, 23, 15, tzinfo=UTC).isoformat(),
            },
        )
        assert "2030年3月1日 23:15" in later


def test_the_404_page_is_styled_and_translated(owner):
    answer = get(owner, "/no-such-page/")
    assert answer.status_code == 404
    page = answer.content.decode()
    assert "找不到页面" in page and "deskpool/app.css" in page and 'href="/"' in page


def test_the_500_page_is_translated_and_needs_no_database(django_assert_num_queries):
    request = RequestFactory().get("/")
    with translation.override("zh-hans"), django_assert_num_queries(0):
        try:
            raise RuntimeError("boom")
        except RuntimeError:
            answer = server_error(request)
    assert answer.status_code == 500
    page = answer.content.decode()
    assert '<html lang="zh-hans">' in page and "出错了" in page


def test_course_dates_read_in_chinese_order(owner, pool, profile):
    course = Course.objects.create(code="cs101", title="GPUs")
    course.instructors.add(owner)
    first = timezone.localdate() + timedelta(days=14 - timezone.localdate().weekday())
    plan = check_series(
        owner, "cs101", profile.pk, 2, first, first + timedelta(weeks=1), True, time(9), time(11)
    )
    do_create_series(owner, plan)
    page = get(owner, f"/courses/cs101/calendar/?week={first.isoformat()}").content.decode()
    assert f"{first.month}月{first.day}日 星期一" in page  # the day's heading
    assert f"{first.year}年{first.month}月{first.day}日" in page  # week of …
    english = get(owner, f"/courses/cs101/calendar/?week={first.isoformat()}", "en")
    assert f"Mon {first.day} {first:%b}" in english.content.decode()
