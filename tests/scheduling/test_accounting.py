"""Accounting: a usage record per run (across preemption, requeue and node loss), quotas that
keep the earlier runs, the price list's versions, booking billing, and reports that reconcile
exactly with the records, and the records with the sessions' run intervals."""

from __future__ import annotations

from datetime import date, timedelta
from decimal import Decimal

import pytest
from django.conf import settings
from django.utils import timezone

from people.models import Course, Member
from scheduling.choices import ON_NODE_STATES, SessionState
from scheduling.models import Booking, Gpu, Node, PriceRule, Session, UsageRecord
from scheduling.rules import pricing
from scheduling.services import ServiceError
from scheduling.services.accounting import (
    booking_charge,
    check_price,
    do_price,
    price_lines,
    report_csv,
    row_fields,
    totals,
    usage_report,
)
from scheduling.services.agent_sessions import do_report
from scheduling.services.cycle import do_scheduling_cycle
from scheduling.services.health import do_sweep_silent_nodes
from scheduling.services.lifecycle import do_transition
from scheduling.services.sessions import check_submit, do_submit
from scheduling.services.timers import finish_grace_periods
from scheduling.services.usage import collect_usage

from ..conftest import gpu_inventory

pytestmark = pytest.mark.django_db

S = SessionState


def submit(user, profile) -> Session:
    return do_submit(user, check_submit(user, profile.pk, "hobby", None))


def report_running(session: Session) -> Session:
    session = Session.objects.get(pk=session.pk)
    assert session.state == S.PLACED and session.node is not None
    return do_report(session.node, session.pk, {"state": "RUNNING", "port": 32000})


def runs_of(session: Session) -> list[UsageRecord]:
    return list(UsageRecord.objects.filter(session=session).order_by("run"))


def exact(record: UsageRecord) -> tuple[Decimal, Decimal]:
    """GPU-hours and CU-hours recounted from the run's interval."""
    assert record.ended_at is not None
    hours = pricing.hours_between(record.started_at, record.ended_at)
    return (
        pricing.held_hours(record.gpu_share, hours),
        pricing.held_hours(record.compute_units, hours),
    )


def price(kind="", profile="", unit="gpu_hour", amount="2.00", since=None, until=None):
    return check_price(
        slice_kind=kind,
        profile=profile,
        unit=unit,
        price=Decimal(amount),
        currency="CHF",
        valid_from=since or date(2026, 1, 1),
        valid_until=until,
    )


def test_a_preempted_requeued_and_node_lost_session_has_a_record_per_run_that_reconciles(
    owner, admin_user, profile, register_node
):
    register_node("gpu-a01", [gpu_inventory("GPU-a", 0, mig_slices=4)])
    register_node("gpu-b01", [gpu_inventory("GPU-b", 0, mig_slices=4)])
    session = submit(owner, profile)
    do_scheduling_cycle()
    first = report_running(session)
    [run1] = runs_of(session)
    assert (run1.run, run1.ended_at, run1.started_at) == (1, None, first.started_at)
    assert (run1.slice_kind, run1.mig_profile, run1.slices) == ("mig", "1g.10gb", 1)
    assert "A100" in run1.gpu_model and run1.node_hostname == first.node.hostname
    assert run1.gpu_share == pytest.approx(0.142) and run1.compute_units == first.compute_units
    assert (run1.username, run1.purpose, run1.profile_slug) == ("ada", "hobby", "painting")

    # Preempted: its grace ends, it goes back to the queue; the record keeps the run.
    do_transition(session.pk, S.PREEMPTING, actor="test", preempt_deadline=timezone.now())
    finish_grace_periods(timezone.now())
    requeued = Session.objects.get(pk=session.pk)
    assert requeued.state == S.PREEMPTED and requeued.started_at is None
    run1.refresh_from_db()
    assert run1.end_state == S.PREEMPTED and run1.ended_at is not None

    # Placed again and running; then its node goes silent and the sweep requeues it.
    do_scheduling_cycle()
    second = report_running(session)
    lost_node = second.node
    now = timezone.now()
    Node.objects.filter(pk=lost_node.pk).update(
        last_heartbeat=now - timedelta(seconds=settings.NODE_LOST_AFTER_S + 1)
    )
    do_sweep_silent_nodes(now)
    assert Session.objects.get(pk=session.pk).state == S.QUEUED

    # A third run on the other node, to its end.
    do_scheduling_cycle()
    third = report_running(session)
    assert third.node != lost_node
    ended = do_report(third.node, session.pk, {"state": "ENDED"})

    runs = runs_of(session)
    assert [(r.run, r.end_state) for r in runs] == [(1, "PREEMPTED"), (2, "QUEUED"), (3, "ENDED")]
    assert runs[1].started_at == second.started_at and runs[1].node_hostname == lost_node.hostname
    assert runs[2].started_at == third.started_at and runs[2].ended_at == ended.ended_at
    for earlier, later in zip(runs, runs[1:], strict=False):
        assert earlier.ended_at is not None and earlier.ended_at <= later.started_at
    for r in runs:
        assert (r.gpu_hours, r.cu_hours) == exact(r)  # records = the run intervals
        assert r.idle_gpu_hours == 0 and r.utilisation_pct is None  # no reading: 0 idle

    today = timezone.localdate()
    rows = usage_report("user", "week", today - timedelta(days=1), today)
    summed = totals(rows)
    assert summed["gpu_hours"] == sum(r.gpu_hours for r in runs)  # report = the records
    assert summed["cu_hours"] == sum(r.cu_hours for r in runs)
    assert sum(row.runs for row in rows) == 3


@pytest.mark.parametrize("end", [S.ENDED, S.FAILED, S.LOST, S.EXPIRED])
def test_every_end_of_a_run_closes_its_record_and_stopping_or_preempting_keep_it_open(
    owner, profile, pool, end
):
    session = submit(owner, profile)
    do_scheduling_cycle()
    report_running(session)
    via = S.STOPPING if end == S.ENDED else S.PREEMPTING if end == S.LOST else None
    if via is not None:
        do_transition(session.pk, via, actor="test")
        assert runs_of(session)[0].ended_at is None  # the desktop still runs
    if end == S.FAILED:
        do_report(Session.objects.get(pk=session.pk).node, session.pk, {"state": "FAILED"})
    else:
        do_transition(session.pk, end, actor="test")

    finished = Session.objects.get(pk=session.pk)
    [run] = runs_of(session)
    assert (run.end_state, run.ended_at) == (end, finished.ended_at)
    assert (run.gpu_hours, run.cu_hours) == exact(run)
    assert UsageRecord.objects.filter(ended_at=None).count() == 0


def test_quotas_and_fair_share_keep_the_hours_of_a_run_that_was_requeued(owner, profile, pool):
    session = submit(owner, profile)
    do_scheduling_cycle()
    three_hours_ago = timezone.now() - timedelta(hours=3)
    do_transition(session.pk, S.RUNNING, actor="test", started_at=three_hours_ago)
    units = Session.objects.get(pk=session.pk).compute_units
    assert units > 0
    do_transition(session.pk, S.QUEUED, actor="test")  # requeued: started_at is cleared

    usage = collect_usage(timezone.now(), 7.0, ON_NODE_STATES)

    assert Session.objects.get(pk=session.pk).started_at is None
    assert usage.week[("user", "ada")] == pytest.approx(units * 3, rel=1e-3)
    assert usage.decayed_by_user["ada"] == pytest.approx(units * 3, rel=1e-2)


def test_idle_hours_come_from_the_gpus_utilisation_reading(owner, profile, pool):
    session = submit(owner, profile)
    do_scheduling_cycle()
    do_transition(
        session.pk, S.RUNNING, actor="test", started_at=timezone.now() - timedelta(hours=2)
    )
    [run] = runs_of(session)
    gpu = Gpu.objects.get(slices__allocation__session=session, slices__allocation__released_at=None)
    Gpu.objects.filter(pk=gpu.pk).update(metrics={"uuid": gpu.uuid, "utilization_pct": 25.0})
    do_transition(session.pk, S.ENDED, actor="test")

    run.refresh_from_db()
    assert run.utilisation_pct == 25.0
    assert run.idle_gpu_hours == (run.gpu_hours * Decimal("0.75")).quantize(Decimal("0.000001"))
    assert run.gpu_hours > Decimal("0.2")


def test_price_rules_are_versioned_by_dates_and_overlaps_of_one_key_are_refused(
    admin_user, profile
):
    do_price(admin_user, price("mig", amount="2.00", until=date(2026, 6, 30)))
    with pytest.raises(ServiceError) as refused:
        check_price(
            slice_kind="mig",
            profile="",
            unit="gpu_hour",
            price=Decimal("3"),
            currency="CHF",
            valid_from=date(2026, 6, 1),
            valid_until=None,
        )
    assert refused.value.field == "valid_from"
    do_price(admin_user, price("mig", amount="3.00", since=date(2026, 7, 1)))  # the next version
    do_price(admin_user, price("", "painting", amount="5.00"))  # another key may overlap
    with pytest.raises(ServiceError) as currency:
        check_price(
            slice_kind="",
            profile="",
            unit="cu_hour",
            price=Decimal("1"),
            currency="EUR",
            valid_from=date(2026, 1, 1),
            valid_until=None,
        )
    assert currency.value.field == "currency"
    with pytest.raises(ServiceError) as unknown:
        price("", "no-such-profile")
    assert unknown.value.field == "profile"
    assert PriceRule.objects.count() == 3

    lines = price_lines()
    spring = pricing.line_for(lines, "mig", "other", date(2026, 3, 1))
    autumn = pricing.line_for(lines, "mig", "other", date(2026, 9, 1))
    assert (spring.price, autumn.price) == (Decimal("2.00"), Decimal("3.00"))
    assert pricing.line_for(lines, "mig", "painting", date(2026, 3, 1)).price == Decimal("5.00")
    assert pricing.line_for(lines, "share", "other", date(2026, 3, 1)) is None


def test_a_booking_is_billed_on_the_seats_it_held_used_or_not(admin_user, profile, pool):
    course = Course.objects.create(code="cv101", title="Vision", department="Physics")
    now = timezone.now()
    booking = Booking.objects.create(
        course=course,
        profile=profile,
        seats=3,
        starts_at=now - timedelta(hours=3),
        ends_at=now - timedelta(hours=1),
    )
    do_price(admin_user, price("mig", amount="2.00", since=date(2000, 1, 1)))

    charge = booking_charge(booking, price_lines(), now)

    # The smallest slice that fits the profile: a MIG 1g.10gb, 0.142 of an A100.
    assert charge.slice_kind == "mig"
    assert charge.gpu_hours == Decimal("0.852000")  # 3 seats x 2 h x 0.142
    assert charge.cost == Decimal("1.70")
    start = timezone.localdate(booking.starts_at)
    rows = usage_report("course", "month", start, timezone.localdate(now), now=now)
    booked = [r for r in rows if r.key == "cv101"]
    assert sum(r.booked_gpu_hours for r in booked) == Decimal("0.852000")
    assert sum(r.cost for r in booked) == Decimal("1.70")
    assert sum(r.gpu_hours for r in booked) == 0  # nobody used it: billed all the same


def record(user, started, hours, *, department="", course="", booking=None, share=0.5):
    gpu_hours = pricing.held_hours(share, Decimal(hours))
    return UsageRecord.objects.create(
        user=user,
        username=user.username,
        department=department,
        course_code=course,
        purpose="coursework",
        profile_slug="painting",
        booking_id=booking,
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


def test_reports_group_by_department_course_and_user_per_week_and_month_with_csv(
    make_user, admin_user
):
    ada, ben = make_user("ada"), make_user("ben")
    Member.objects.update_or_create(user=ada, defaults={"department": "Physics"})
    monday = timezone.make_aware(timezone.datetime(2026, 3, 2, 10, 0))
    records = [
        record(ada, monday, 2, department="Physics", course="ph1"),
        record(ada, monday + timedelta(days=7), 1, department="Physics", course="ph1"),
        record(ben, monday + timedelta(days=1), 4, department="Maths", course="ma1"),
        record(ben, monday + timedelta(days=2), 3, department="Maths", course="ma1", booking=7),
    ]
    do_price(admin_user, price("share", amount="1.50", since=date(2026, 1, 1)))

    weekly = usage_report("department", "week", date(2026, 3, 1), date(2026, 3, 31))
    monthly = usage_report("department", "month", date(2026, 3, 1), date(2026, 3, 31))
    by_user = usage_report("user", "month", date(2026, 3, 1), date(2026, 3, 31))
    by_course = usage_report("course", "month", date(2026, 3, 1), date(2026, 3, 31))

    assert [(r.key, r.period_start, r.runs) for r in weekly] == [
        ("Maths", date(2026, 3, 2), 2),
        ("Physics", date(2026, 3, 2), 1),
        ("Physics", date(2026, 3, 9), 1),
    ]
    assert [(r.key, r.runs) for r in monthly] == [("Maths", 2), ("Physics", 2)]
    assert {r.key for r in by_user} == {"ada", "ben"}
    assert {r.key for r in by_course} == {"ph1", "ma1"}
    maths = next(r for r in monthly if r.key == "Maths")
    # Elastic use is billed on what it used; the booked run (booking 7) costs nothing more.
    assert maths.gpu_hours == Decimal("3.500000")
    assert maths.cost == Decimal("3.00")  # 2 GPU-hours x 1.50
    for rows in (weekly, monthly, by_user, by_course):
        summed = totals(rows)
        assert summed["gpu_hours"] == sum(r.gpu_hours for r in records)
        assert summed["idle_gpu_hours"] == Decimal("0.4")
        assert summed["cost"] == Decimal("3.00") + Decimal("2.25")  # ben's 2 h, ada's 1.5 h

    lines = report_csv(row_fields(r) for r in monthly).splitlines()
    assert lines[0].startswith("group,key,period,period_start,runs,gpu_hours")
    assert lines[1].startswith("department,Maths,month,2026-03-01,2,3.500000,")
    assert len(lines) == 3

    with pytest.raises(ServiceError) as refused:
        usage_report("team", "week", date(2026, 3, 1), date(2026, 3, 31))
    assert refused.value.field == "group"
