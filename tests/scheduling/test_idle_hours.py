"""GPU idle allocated hours (issue 15): each usage sample adds the time since the previous
one to the open run's GPU-idle seconds when the GPU was under its policy's threshold (busy
samples and samples without a GPU figure add nothing; a gap counts two heartbeats at most),
times the GPUs the run holds; the console's sums per course and department, in SQL."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from people.models import Member
from scheduling.choices import SessionState
from scheduling.models import IdlePolicy, UsageRecord
from scheduling.services import ServiceError
from scheduling.services.idle_hours import check_days, idle_hours
from scheduling.services.lifecycle import do_transition
from scheduling.services.session_activity import record_usage

from .test_lifecycle import run_desktop

pytestmark = [pytest.mark.django_db, pytest.mark.lifecycle]


def open_run(session) -> UsageRecord:
    return UsageRecord.objects.get(session=session, ended_at=None)


def idle_seconds(session) -> float:
    return sum(
        UsageRecord.objects.filter(session=session).values_list("gpu_idle_seconds", flat=True)
    )


@pytest.fixture
def heartbeat_10s(settings):
    settings.AGENT_HEARTBEAT_INTERVAL_S = 10.0  # a sample speaks for 20 s at most


def test_idle_samples_count_busy_ones_do_not_and_gaps_are_capped(
    owner, profile, pool, heartbeat_10s
):
    session = run_desktop(owner, profile)
    run = open_run(session)
    share = run.gpu_share
    assert share > 0
    start = run.started_at

    def sample(seconds: float, gpu: float | None) -> float:
        record_usage(session.pk, gpu, 5.0, at=start + timedelta(seconds=seconds))
        return idle_seconds(session) / share

    assert sample(15, 1.0) == pytest.approx(15)  # from the run's start: idle
    assert sample(30, 80.0) == pytest.approx(15)  # busy: nothing added
    assert sample(45, 4.9) == pytest.approx(30)  # idle again (under the default 5 %)
    assert sample(60, 5.0) == pytest.approx(30)  # at the threshold: busy
    assert sample(70, None) == pytest.approx(30)  # no GPU figure: not known to be idle
    assert sample(80, 0.0) == pytest.approx(40)
    assert sample(680, 0.0) == pytest.approx(60)  # ten minutes of silence count 20 s
    assert sample(680, 0.0) == pytest.approx(60)  # the same moment again: nothing


def test_the_sessions_policy_sets_the_threshold(owner, profile, pool, heartbeat_10s):
    IdlePolicy.objects.create(profile=profile, gpu_idle_pct=50.0)
    session = run_desktop(owner, profile)
    run = open_run(session)
    record_usage(session.pk, 30.0, None, at=run.started_at + timedelta(seconds=10))
    assert idle_seconds(session) == pytest.approx(10 * run.gpu_share)
    record_usage(session.pk, 60.0, None, at=run.started_at + timedelta(seconds=20))
    assert idle_seconds(session) == pytest.approx(10 * run.gpu_share)


def test_only_the_open_run_counts_and_survives_the_run(owner, profile, pool, heartbeat_10s):
    session = run_desktop(owner, profile)
    run = open_run(session)
    record_usage(session.pk, 0.0, None, at=run.started_at + timedelta(seconds=20))
    do_transition(session.pk, SessionState.STOPPING, actor="test")
    do_transition(session.pk, SessionState.ENDED, actor="test")
    closed = UsageRecord.objects.get(pk=run.pk)
    assert closed.ended_at is not None
    assert closed.gpu_idle_seconds == pytest.approx(20 * run.gpu_share)
    # A late sample of a session that no longer runs adds to no record.
    record_usage(session.pk, 0.0, None, at=run.started_at + timedelta(seconds=40))
    assert UsageRecord.objects.get(pk=run.pk).gpu_idle_seconds == closed.gpu_idle_seconds


def record(username, course, department, *, hours_ago, hours, share, idle_h, gpu_h=None):
    now = timezone.now()
    started = now - timedelta(hours=hours_ago)
    return UsageRecord.objects.create(
        username=username,
        course_code=course,
        department=department,
        purpose="coursework" if course else "hobby",
        profile_slug="painting",
        started_at=started,
        ended_at=None if hours is None else started + timedelta(hours=hours),
        gpu_share=share,
        gpu_hours=share * hours if gpu_h is None and hours is not None else (gpu_h or 0),
        gpu_idle_seconds=idle_h * 3600,
    )


def test_sums_per_course_and_department_over_the_period(db):
    now = timezone.now()
    record("ada", "ART101", "Arts", hours_ago=5, hours=2, share=0.5, idle_h=0.25)
    record("ben", "ART101", "Arts", hours_ago=30, hours=4, share=1.0, idle_h=1.0)
    record("cy", "CS200", "Computing", hours_ago=10, hours=1, share=0.25, idle_h=0.2)
    record("cy", "", "Computing", hours_ago=3, hours=2, share=1.0, idle_h=0.5)  # hobby
    record("dee", "", "", hours_ago=1, hours=1, share=1.0, idle_h=0.0)  # no department
    # Open: counted up to now (2 h x 0.5 GPU = 1 GPU-hour).
    record("eve", "CS200", "Computing", hours_ago=2, hours=None, share=0.5, idle_h=0.5)
    # Not counted: started before the period, or no GPU.
    record("ada", "ART101", "Arts", hours_ago=24 * 8, hours=2, share=1.0, idle_h=2.0)
    record("ada", "ART101", "Arts", hours_ago=4, hours=2, share=0.0, idle_h=0.0)

    report = idle_hours(7, now=now)
    assert report.since == now - timedelta(days=7) and report.until == now
    courses = {row.key: row for row in report.courses}
    assert set(courses) == {"ART101", "CS200"}
    assert courses["ART101"].runs == 2
    assert courses["ART101"].gpu_hours == pytest.approx(1.0 + 4.0)
    assert courses["ART101"].idle_gpu_hours == pytest.approx(1.25)
    assert courses["ART101"].idle_pct == pytest.approx(25.0)
    assert courses["CS200"].runs == 2
    assert courses["CS200"].gpu_hours == pytest.approx(0.25 + 1.0, abs=1e-3)
    assert courses["CS200"].idle_gpu_hours == pytest.approx(0.7)

    departments = {row.key: row for row in report.departments}
    assert set(departments) == {"Arts", "Computing", ""}
    assert departments["Arts"].gpu_hours == pytest.approx(5.0)
    assert departments["Computing"].runs == 3
    assert departments["Computing"].gpu_hours == pytest.approx(0.25 + 2.0 + 1.0, abs=1e-3)
    assert departments["Computing"].idle_gpu_hours == pytest.approx(1.2)
    assert departments[""].idle_pct == 0.0

    # One day: only the runs of the last 24 hours.
    day = {row.key: row for row in idle_hours(1, now=now).courses}
    assert day["ART101"].runs == 1 and day["ART101"].gpu_hours == pytest.approx(1.0)


def test_a_run_of_a_person_gets_their_department(owner, profile, pool, heartbeat_10s):
    Member.objects.update_or_create(user=owner, defaults={"department": "Physics"})
    session = run_desktop(owner, profile)
    UsageRecord.objects.filter(session=session).update(
        started_at=timezone.now() - timedelta(minutes=1)
    )
    run = open_run(session)
    record_usage(session.pk, 0.0, None, at=run.started_at + timedelta(seconds=18))
    departments = {row.key: row for row in idle_hours().departments}
    assert departments["Physics"].idle_gpu_hours == pytest.approx(18 * run.gpu_share / 3600)


@pytest.mark.parametrize("days", [0, 91, -3])
def test_the_period_is_1_to_90_days(days):
    with pytest.raises(ServiceError) as refused:
        check_days(days)
    assert refused.value.field == "days"
    assert check_days(None) == 7 and check_days(90) == 90
