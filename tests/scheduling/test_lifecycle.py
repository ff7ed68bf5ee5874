"""Desktops that end well, on the database: the idle sweep warns and suspends (the slice is
released, the node stops the desktop), resume requeues with the age kept, 24 hours suspended
ends it; time-limit warnings at 15 and 5 minutes; extensions allowed, refused with a reason,
audited."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from people.models import Course
from portal.celery import BEAT_ENTRIES
from scheduling import events
from scheduling.choices import AuditKind, IdleState, SessionState
from scheduling.models import (
    Allocation,
    AuditEvent,
    Booking,
    DesktopProfile,
    IdlePolicy,
    LifecycleNotices,
    Quota,
    Session,
    SessionActivity,
)
from scheduling.services import Conflict, NotFound
from scheduling.services.agent_sessions import desired_sessions, do_report
from scheduling.services.cycle import do_scheduling_cycle
from scheduling.services.extend import do_extend, profile_room
from scheduling.services.idle import do_idle_sweep, do_resume
from scheduling.services.session_activity import (
    record_input,
    record_usage,
    viewer_closed,
    viewer_opened,
)
from scheduling.services.sessions import check_submit, do_stop, do_submit
from scheduling.tasks import run_idle_sweep

pytestmark = [pytest.mark.django_db, pytest.mark.lifecycle]

S = SessionState


def run_desktop(user, profile, purpose: str = "hobby") -> Session:
    """A desktop placed by a cycle and reported RUNNING by its node's agent."""
    session = do_submit(user, check_submit(user, profile.pk, purpose, None))
    assert do_scheduling_cycle().placed >= 1
    session.refresh_from_db()
    do_report(session.node, session.pk, {"state": "RUNNING", "port": 32000, "audio_port": 32001})
    return Session.objects.get(pk=session.pk)


def started_ago(session: Session, minutes: float) -> None:
    at = timezone.now() - timedelta(minutes=minutes)
    Session.objects.filter(pk=session.pk).update(started_at=at)


def live_holds(session: Session) -> int:
    return Allocation.objects.filter(session=session, released_at=None).count()


def suspend(session: Session) -> Session:
    """Quiet for 40 minutes (low GPU), then 15 more after the warning: suspended."""
    started_ago(session, 40)
    now = timezone.now()
    record_usage(session.pk, 1.0, 2.0, at=now)
    assert do_idle_sweep(now).warned == 1
    later = now + timedelta(minutes=15)
    record_usage(session.pk, 1.0, 2.0, at=later)
    assert do_idle_sweep(later).suspended == 1
    return Session.objects.get(pk=session.pk)


def test_a_quiet_desktop_is_warned_then_suspended_releasing_its_slice(owner, profile, pool):
    session = run_desktop(owner, profile)
    node = session.node
    assert live_holds(session) == 1
    assert (session.desktop_port, session.desktop_audio_port) == (32000, 32001)
    started_ago(session, 40)
    now = timezone.now()
    record_usage(session.pk, 1.0, 2.0, at=now)
    viewer_opened(session.pk, at=now)  # a tab left open is not use

    first = do_idle_sweep(now)
    assert (first.warned, first.suspended) == (1, 0)
    warned = Session.objects.get(pk=session.pk)
    assert (warned.state, warned.idle_state, warned.idle_since) == (S.RUNNING, "warned", now)
    assert do_idle_sweep(now).changed == 0  # idempotent

    later = now + timedelta(minutes=15)
    record_usage(session.pk, 2.0, 1.0, at=later)
    assert do_idle_sweep(later).suspended == 1
    suspended = Session.objects.get(pk=session.pk)
    assert suspended.state == S.SUSPENDED
    assert suspended.idle_state == IdleState.SUSPENDED
    assert suspended.reason_code == "idle_suspended"
    assert live_holds(session) == 0  # the slice is free for someone else
    assert suspended.node is None and suspended.desktop_port is None
    assert suspended.desktop_audio_port is None  # the next placement reports its own
    assert session.pk not in {d.session_id for d in desired_sessions(node)}  # agent stops it
    transition = AuditEvent.objects.filter(
        session_id=session.pk, kind=AuditKind.SESSION_TRANSITION, data__to="SUSPENDED"
    ).get()
    assert transition.data["released"] == 1 and transition.node_id == node.pk


def test_input_after_the_warning_keeps_the_desktop(owner, profile, pool):
    session = run_desktop(owner, profile)
    started_ago(session, 40)
    now = timezone.now()
    record_usage(session.pk, 0.0, 0.0, at=now)
    do_idle_sweep(now)
    record_input(session.pk, 12, at=now + timedelta(minutes=3))
    record_input(session.pk, 3, at=now + timedelta(minutes=2))  # a late batch: no step back
    later = now + timedelta(minutes=15)
    record_usage(session.pk, 0.0, 0.0, at=later)
    assert do_idle_sweep(later).suspended == 0
    kept = Session.objects.get(pk=session.pk)
    # reset by the input, and quiet for the 12 minutes since: idle, not warned any more
    assert (kept.state, kept.idle_state) == (S.RUNNING, "idle")
    activity = SessionActivity.objects.get(session=session)
    assert activity.input_events == 15
    assert activity.last_input_at == now + timedelta(minutes=3)


def test_thesis_training_with_nobody_connected_stays_under_a_strict_policy(
    owner, profile, pool, grant_thesis
):
    grant_thesis(owner)
    IdlePolicy.objects.create(gpu_needs_viewer=True)
    thesis = run_desktop(owner, profile, purpose="thesis")
    hobby = run_desktop(owner, profile)
    for session in (thesis, hobby):
        started_ago(session, 90)
        viewer_opened(session.pk)
        viewer_closed(session.pk)
    now = timezone.now()
    for minute in range(0, 90, 10):
        for session in (thesis, hobby):
            record_usage(session.pk, 95.0, 4.0, at=now - timedelta(minutes=minute))
    assert do_idle_sweep(now).warned == 1
    assert Session.objects.get(pk=thesis.pk).idle_state == "active"
    assert Session.objects.get(pk=hobby.pk).idle_state == "warned"
    assert SessionActivity.objects.get(session=thesis).viewers == 0


def test_a_booked_class_session_is_not_idle_inside_its_window(owner, profile, pool):
    session = run_desktop(owner, profile)
    assert session.booking is None  # made a class session below
    course_booking = _booking_now(owner, profile)
    Session.objects.filter(pk=session.pk).update(booking=course_booking)
    started_ago(session, 90)
    now = timezone.now()
    record_usage(session.pk, 0.0, 0.0, at=now)
    assert do_idle_sweep(now).warned == 0
    assert Session.objects.get(pk=session.pk).idle_state == "active"


def _booking_now(owner, profile):
    course = Course.objects.create(code="ART101", title="Painting")
    now = timezone.now()
    return Booking.objects.create(
        course=course,
        profile=profile,
        seats=1,
        starts_at=now - timedelta(hours=1),
        ends_at=now + timedelta(hours=1),
        created_by=owner,
    )


def test_resume_requeues_with_the_age_kept_and_a_day_suspended_ends(owner, profile, pool):
    session = run_desktop(owner, profile)
    created = session.created_at
    suspended = suspend(session)

    resumed = do_resume(owner, suspended.pk)
    assert resumed.state == S.QUEUED and resumed.created_at == created
    assert (resumed.reason_code, resumed.idle_state) == ("resumed", "active")
    assert do_scheduling_cycle().placed == 1
    assert live_holds(session) == 1
    with pytest.raises(Conflict):
        do_resume(owner, session.pk)  # not suspended

    again = run_again_and_suspend(session)
    day = again.idle_since + timedelta(hours=24)
    assert do_idle_sweep(day - timedelta(minutes=1)).ended == 0
    assert do_idle_sweep(day).ended == 1
    ended = Session.objects.get(pk=session.pk)
    assert (ended.state, ended.reason_code) == (S.ENDED, "idle_ended")


def run_again_and_suspend(session: Session) -> Session:
    placed = Session.objects.get(pk=session.pk)
    do_report(placed.node, placed.pk, {"state": "RUNNING", "port": 32001})
    return suspend(placed)


def test_only_the_owner_resumes_and_a_suspended_session_can_be_stopped(
    owner, stranger, profile, pool
):
    suspended = suspend(run_desktop(owner, profile))
    with pytest.raises(NotFound):
        do_resume(stranger, suspended.pk)
    stopped = do_stop(owner, suspended)
    assert stopped.state == S.ENDED


def test_time_limit_warnings_at_15_and_5_minutes_live_and_by_email(
    owner, profile, pool, smtp_inbox, django_capture_on_commit_callbacks
):
    owner.email = "ada@example.edu"
    owner.save()
    LifecycleNotices.objects.create(user=owner, email_warnings=True)
    session = run_desktop(owner, profile)
    started_ago(session, 240 - 14)
    now = timezone.now()
    with django_capture_on_commit_callbacks(execute=True):
        assert do_idle_sweep(now).limit_warnings == 1
    assert do_idle_sweep(now + timedelta(minutes=1)).limit_warnings == 0  # once
    with django_capture_on_commit_callbacks(execute=True):
        assert do_idle_sweep(now + timedelta(minutes=10)).limit_warnings == 1  # 4 left
    subjects = [" ".join(str(m["Subject"]).split()) for m in smtp_inbox.messages]
    assert subjects == [
        f"Deskpool: your desktop {session.pk} ends in 15 minutes",
        f"Deskpool: your desktop {session.pk} ends in 5 minutes",
    ]
    # An extension moves the limit: its warnings come again.
    do_extend(owner, session.pk)
    assert do_idle_sweep(now + timedelta(minutes=60)).limit_warnings == 1


def test_an_extension_moves_the_limit_and_is_audited(owner, profile, pool):
    session = run_desktop(owner, profile)
    before = session.ends_at
    extended = do_extend(owner, session.pk)
    assert extended.extended_minutes == 60
    assert extended.ends_at == before + timedelta(minutes=60)
    event = AuditEvent.objects.get(session_id=session.pk, kind=AuditKind.SESSION_EXTENDED)
    assert event.actor == "user:ada" and event.data["minutes"] == 60


def test_an_extension_past_the_profiles_maximum_is_refused(owner, profile, pool):
    DesktopProfile.objects.filter(pk=profile.pk).update(max_total_minutes=330)
    session = run_desktop(owner, profile)
    do_extend(owner, session.pk)  # 240 + 60 = 300
    with pytest.raises(Conflict, match="past its profile's maximum of 330 minutes"):
        do_extend(owner, session.pk)
    assert AuditEvent.objects.filter(kind=AuditKind.SESSION_EXTENDED).count() == 1


def test_the_profiles_room_is_the_last_time_limit_that_one_more_step_fits(owner, profile, pool):
    """What the desktop page applies to each new limit is what do_extend checks."""
    DesktopProfile.objects.filter(pk=profile.pk).update(max_total_minutes=330)
    session = run_desktop(owner, profile)
    room = profile_room(session)
    assert session.started_at and session.ends_at
    assert room.last_end == session.started_at + timedelta(minutes=330 - 60)
    assert session.ends_at <= room.last_end  # 240 now: one step fits
    extended = do_extend(owner, session.pk)
    assert extended.ends_at and extended.ends_at > room.last_end  # 300: the next does not
    assert "past its profile's maximum of 330 minutes" in room.refusal
    DesktopProfile.objects.filter(pk=profile.pk).update(extend_step_minutes=0)
    no_step = profile_room(Session.objects.select_related("profile").get(pk=session.pk))
    assert (no_step.last_end, no_step.refusal) == (
        None,
        "Desktops of this kind cannot be given more time.",
    )


def test_an_extension_is_refused_while_someone_waits_for_that_kind(owner, stranger, profile, pool):
    session = run_desktop(owner, profile)
    do_submit(stranger, check_submit(stranger, profile.pk, "hobby", None))  # not placed yet
    with pytest.raises(Conflict, match="Someone is waiting for this kind of desktop"):
        do_extend(owner, session.pk)
    assert Session.objects.get(pk=session.pk).extended_minutes == 0


def test_an_extension_is_refused_when_the_quota_has_no_room(owner, profile, pool):
    session = run_desktop(owner, profile)
    assert session.compute_units > 0
    hours_to_limit = session.compute_units * 4  # the 240 minutes already booked
    Quota.objects.create(scope="user", key="ada", max_gpu_hours_week=hours_to_limit + 0.1)
    with pytest.raises(Conflict, match="The weekly quota of ada has no room"):
        do_extend(owner, session.pk)
    Quota.objects.filter(key="ada").update(max_gpu_hours_week=hours_to_limit * 2)
    assert do_extend(owner, session.pk).extended_minutes == 60


def test_someone_elses_session_cannot_be_extended(owner, stranger, profile, pool):
    session = run_desktop(owner, profile)
    with pytest.raises(NotFound):
        do_extend(stranger, session.pk)


@pytest.fixture
def sent(monkeypatch):
    """Every message handed to the channel layer: (group, payload)."""
    record = []
    monkeypatch.setattr(events, "_send", lambda group, payload: record.append((group, payload)))
    return record


def test_the_warnings_reach_the_persons_pages_live(
    owner, profile, pool, sent, django_capture_on_commit_callbacks
):
    session = run_desktop(owner, profile)
    started_ago(session, 240 - 14)  # 14 minutes to the limit, and quiet since the start
    now = timezone.now()
    record_usage(session.pk, 0.0, 0.0, at=now)
    sent.clear()
    with django_capture_on_commit_callbacks(execute=True):
        result = do_idle_sweep(now)
    assert (result.warned, result.limit_warnings) == (1, 1)
    mine = [p["session"] for g, p in sent if g == events.user_group(owner.pk)]
    assert mine and mine[-1]["idle"]["state"] == "warned"
    assert mine[-1]["ends_at"] is not None


def test_the_beat_runs_the_idle_sweep_every_minute(owner, profile, pool):
    assert ("idle-sweep", "scheduling.tasks.run_idle_sweep", "IDLE_SWEEP_SECONDS") in BEAT_ENTRIES
    session = run_desktop(owner, profile)
    started_ago(session, 40)
    record_usage(session.pk, 0.0, 0.0)
    assert run_idle_sweep() == 1
    assert Session.objects.get(pk=session.pk).idle_state == "warned"
