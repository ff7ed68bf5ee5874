"""The portal's cycle with the real engine: preemption, admission, alerts, quotas, bookings, ETAs.

Real PostgreSQL; the pool is the conftest's ten slices (8 MIG 1g.10gb on two A100s, 2 T4 shares).
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from people.models import Course, ThesisGrant
from scheduling.choices import AuditKind, SessionState
from scheduling.models import (
    Alert,
    AlertRule,
    Allocation,
    AuditEvent,
    Booking,
    DesktopProfile,
    Gpu,
    Quota,
    Session,
    Slice,
)
from scheduling.services import ServiceError
from scheduling.services.alerts import ensure_default_rules, evaluate_alerts
from scheduling.services.cycle import do_scheduling_cycle
from scheduling.services.lifecycle import do_transition
from scheduling.services.pool import pool_alert_level
from scheduling.services.sessions import check_submit, do_submit
from scheduling.services.snapshot import quota_row, quota_rows

pytestmark = pytest.mark.django_db

S = SessionState


def submit(user, profile, purpose="hobby", course=None) -> Session:
    if purpose == "thesis" and not ThesisGrant.objects.active().filter(student=user).exists():
        # As their advisor would: thesis requests need a grant (docs/people.md).
        ThesisGrant.objects.create(student=user, until=timezone.localdate() + timedelta(days=30))
    return do_submit(user, check_submit(user, profile.pk, purpose, course))


def run_all(minutes_ago: int = 60) -> None:
    """Place what fits and mark it RUNNING, as if started ``minutes_ago``."""
    do_scheduling_cycle()
    for s in Session.objects.filter(state=S.PLACED):
        do_transition(
            s.pk,
            S.RUNNING,
            actor="test",
            started_at=timezone.now() - timedelta(minutes=minutes_ago),
        )


def fill(make_user, profile, n: int, purpose: str = "hobby") -> list[Session]:
    users = [make_user(f"filler{i}") for i in range(n)]
    sessions = [submit(u, profile, purpose) for u in users]
    run_all()
    return sessions


def test_registration_records_the_slices_part_of_the_gpu_and_compute_units(pool):
    assert set(Slice.objects.filter(kind="mig").values_list("milli", flat=True)) == {142}
    assert set(Slice.objects.filter(kind="share").values_list("milli", flat=True)) == {500}
    assert Gpu.objects.get(uuid="GPU-c").compute_units == pytest.approx(0.415)
    assert Gpu.objects.get(uuid="GPU-a").compute_units == 1.0


def test_a_thesis_request_preempts_a_hobby_desktop_which_is_requeued_with_its_age(
    make_user, owner, profile, pool
):
    hobby = fill(make_user, profile, 10)
    assert Session.objects.filter(state=S.RUNNING).count() == 10
    thesis = submit(owner, profile, "thesis")
    do_scheduling_cycle()
    victims = Session.objects.filter(state=S.PREEMPTING)
    assert victims.count() == 1
    victim = victims.get()
    assert victim.preempted_for_id == thesis.pk and victim.preempt_deadline is not None
    assert "save your work" in victim.reason
    thesis.refresh_from_db()
    assert thesis.state == S.QUEUED and "grace ends" in thesis.reason
    assert thesis.eta == victim.preempt_deadline
    # The agent keeps the desktop during its grace: a RUNNING report does not move it.
    assert AuditEvent.objects.filter(kind=AuditKind.SESSION_PREEMPTED, session=victim).exists()
    do_scheduling_cycle()  # no second victim while the first one's grace runs
    assert Session.objects.filter(state=S.PREEMPTING).count() == 1
    # Grace over:
    Session.objects.filter(pk=victim.pk).update(preempt_deadline=timezone.now())
    do_scheduling_cycle()
    victim.refresh_from_db()
    thesis.refresh_from_db()
    assert victim.state == S.PREEMPTED and victim.node is None and victim.preempted_for is None
    assert victim.created_at == next(s for s in hobby if s.pk == victim.pk).created_at
    assert not Allocation.objects.filter(session=victim, released_at=None).exists()
    assert thesis.state == S.PLACED


def test_no_preemption_inside_the_protected_runtime(make_user, owner, profile, pool):
    users = [make_user(f"young{i}") for i in range(10)]
    for u in users:
        submit(u, profile)
    run_all(minutes_ago=5)
    thesis = submit(owner, profile, "thesis")
    do_scheduling_cycle()
    assert not Session.objects.filter(state=S.PREEMPTING).exists()
    thesis.refresh_from_db()
    assert thesis.state == S.QUEUED and "estimated start" in thesis.reason
    assert thesis.eta is not None and thesis.eta > timezone.now()


def test_above_the_block_threshold_hobby_is_refused_but_thesis_queues(
    make_user, owner, profile, pool
):
    # The one admission threshold: the "Pool usage" alert rule's levels.
    ensure_default_rules()
    AlertRule.objects.filter(metric="pool_usage").update(warning=40, critical=50, recovery=30)
    fill(make_user, profile, 8)  # the eight MIG slices: 8 x 142 of 2136 milli = 53%
    with pytest.raises(ServiceError) as refused:
        check_submit(owner, profile.pk, "hobby", None)
    assert "at or above its block level of 50%" in refused.value.message
    # The refusal says to come back later; it does not invite a higher purpose.
    assert "thesis" not in refused.value.message and "coursework" not in refused.value.message
    assert submit(owner, profile, "thesis").state == S.QUEUED
    # The same levels raise the rule's alert: critical at once (the pool's level: block).
    evaluate_alerts()
    [alert] = Alert.objects.open().filter(rule__metric="pool_usage")
    assert alert.level == "critical" and pool_alert_level() == "block"
    do_scheduling_cycle()
    evaluate_alerts()
    assert Alert.objects.filter(rule__metric="pool_usage").count() == 1  # no repeat


def test_quotas_block_at_placement_with_a_reason_and_at_submit(make_user, owner, profile, pool):
    Quota.objects.create(scope="user", key="*", max_sessions=1)
    first, second = submit(owner, profile), submit(owner, profile)
    do_scheduling_cycle()
    first.refresh_from_db()
    second.refresh_from_db()
    assert first.state == S.PLACED
    assert second.state == S.QUEUED and second.blocked and second.queue_position is None
    assert second.reason.startswith("Held by a quota: your quota of 1 concurrent desktops")
    # Another user is not held back by ada's use of the default quota.
    other = submit(make_user("cy"), profile)
    do_scheduling_cycle()
    assert Session.objects.get(pk=other.pk).state == S.PLACED
    # GPU-hours this week, checked at submit.
    Quota.objects.create(scope="user", key="dee", max_gpu_hours_week=5)
    dee = make_user("dee")
    Session.objects.create(
        user=dee,
        profile=profile,
        purpose="hobby",
        state=S.ENDED,
        started_at=timezone.now() - timedelta(hours=10),
        ended_at=timezone.now() - timedelta(hours=2),
        compute_units=1.0,
    )
    with pytest.raises(ServiceError) as refused:
        check_submit(dee, profile.pk, "hobby", None)
    assert "5 GPU-hours this week is used (8.0 used)" in refused.value.message


def test_the_api_shows_position_reason_and_estimated_start(make_user, owner, profile, pool):
    fill(make_user, profile, 10, purpose="thesis")
    mine = submit(owner, profile, "thesis")  # hobby is refused: the pool is full
    do_scheduling_cycle()
    client = APIClient()
    client.force_authenticate(owner)
    body = client.get(f"/api/v1/sessions/{mine.pk}/").json()
    assert body["state"] == "QUEUED" and body["queue_position"] == 1
    assert body["eta"] is not None and "estimated start" in body["reason"]
    assert body["blocked"] is False
    # The reason as data: its code and parameters, the estimated start an aware time.
    assert body["reason_code"] == "waiting"
    params = body["reason_params"]
    assert (params["tier"], params["ahead"], params["higher"]) == ("thesis", 0, 0)
    stored_eta = datetime.fromisoformat(params["eta"])  # JSON keeps milliseconds
    eta = datetime.fromisoformat(body["eta"].replace("Z", "+00:00"))
    assert stored_eta.tzinfo is not None and abs(stored_eta - eta) < timedelta(milliseconds=1)


@pytest.fixture
def course(make_user, owner):
    course = Course.objects.create(code="cs101", title="Intro", department="cs")
    teacher = make_user("prof")
    course.instructors.add(teacher)
    course.students.add(owner)
    return course


def test_bookings_are_validated_and_made_by_instructors(course, owner, profile, pool):
    client = APIClient()
    start = timezone.now() + timedelta(hours=2)
    body = {
        "course": "cs101",
        "profile": profile.pk,
        "seats": 4,
        "starts_at": start.isoformat(),
        "ends_at": (start + timedelta(hours=2)).isoformat(),
    }
    client.force_authenticate(owner)
    refused = client.post("/api/v1/bookings/", body, format="json")
    assert refused.status_code == 400 and "Only instructors" in refused.json()["course"][0]
    client.force_authenticate(course.instructors.get())
    too_many = client.post("/api/v1/bookings/", {**body, "seats": 11}, format="json")
    assert too_many.status_code == 400 and "has 10 slices" in too_many.json()["seats"][0]
    backwards = client.post(
        "/api/v1/bookings/", {**body, "ends_at": body["starts_at"]}, format="json"
    )
    assert backwards.status_code == 400 and "ends_at" in backwards.json()
    assert not Booking.objects.exists()
    made = client.post("/api/v1/bookings/", body, format="json")
    assert made.status_code == 201 and made.json()["seats"] == 4
    assert AuditEvent.objects.filter(kind=AuditKind.BOOKING_CREATED).count() == 1
    cancelled = client.post(f"/api/v1/bookings/{made.json()['id']}/cancel/")
    assert cancelled.status_code == 200 and cancelled.json()["cancelled_at"]


def test_a_booking_holds_capacity_and_short_requests_backfill(
    make_user, course, owner, profile, pool
):
    start = timezone.now() + timedelta(hours=2)
    Booking.objects.create(
        course=course,
        profile=profile,
        seats=10,
        starts_at=start,
        ends_at=start + timedelta(hours=2),
    )
    long_one = submit(owner, profile, "thesis")  # 240 min: would still run when class starts
    short_profile = DesktopProfile.objects.create(
        slug="quick", name="Quick look", image=profile.image, cpus=0.5, memory_mb=512,
        gpu_count=1, gpu_memory_min_mb=4000, allowed_kinds=["mig", "share"],
        max_duration_minutes=60,
    )  # fmt: skip
    short = submit(make_user("eve"), short_profile, "hobby")
    do_scheduling_cycle()
    long_one.refresh_from_db()
    short.refresh_from_db()
    assert long_one.state == S.QUEUED and "held for a class booking" in long_one.reason
    assert short.state == S.PLACED
    # In the window, a student of the course asking for coursework gets a booked seat first.
    Booking.objects.update(starts_at=timezone.now() - timedelta(minutes=1))
    seat = submit(owner, profile, "coursework", "cs101")
    assert seat.booking is not None
    do_scheduling_cycle()
    assert Session.objects.get(pk=seat.pk).state == S.PLACED


def test_the_quotas_covering_a_request_are_read_in_one_query(db, django_assert_num_queries):
    own = Quota.objects.create(scope="user", key="ada", max_sessions=2)
    every_user = Quota.objects.create(scope="user", key="*", max_sessions=1)
    physics = Quota.objects.create(scope="department", key="physics", max_gpu_hours_week=10)
    members = [("user", "ada"), ("user", "ben"), ("course", "cs101"), ("department", "physics")]
    with django_assert_num_queries(1):
        rows = quota_rows(members + [("department", "")])
    # Own row first, else the scope's "*"; a member with neither (no course quota) is left
    # out, and so is an empty key.
    assert rows == {
        ("user", "ada"): own,
        ("user", "ben"): every_user,
        ("department", "physics"): physics,
    }
    assert quota_row("user", "ben") == every_user and quota_row("course", "cs101") is None
