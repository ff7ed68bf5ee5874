"""A cycle's warm claims applied together (``warm.claim_many``): the same sessions, holds,
audit events, broadcasts and wakes as one by one, in a number of queries that does not grow
with the claims, within quotas, and one by one again when one of them raced."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from nodeagent.protocol import WarmReport
from people.models import Course
from scheduling.choices import AuditKind, SessionState
from scheduling.models import Allocation, AuditEvent, Booking, Node, Quota, Session, WarmDesktop
from scheduling.services import agent_wake
from scheduling.services import warm as warm_service
from scheduling.services.cycle import do_scheduling_cycle
from scheduling.services.sessions import check_submit, do_submit
from scheduling.services.warm import do_warm_report

from ..conftest import gpu_inventory

pytestmark = pytest.mark.django_db

S = SessionState


def ready_class(make_user, profile, code: str, seats: int, students: int | None = None):
    """A course booked for ``seats`` from a minute ago, its students, and a cycle that
    starts its warm desktops, all of them then reported READY by the agent."""
    course = Course.objects.create(code=code, title=code, department="cs")
    people = [make_user(f"{code}-{n}") for n in range(seats if students is None else students)]
    course.students.add(*people)
    start = timezone.now() - timedelta(minutes=1)
    booking = Booking.objects.create(
        course=course,
        profile=profile,
        seats=seats,
        starts_at=start,
        ends_at=start + timedelta(hours=2),
    )
    do_scheduling_cycle()
    warm = list(WarmDesktop.objects.filter(booking=booking).select_related("node"))
    assert len(warm) == seats
    for n, desktop in enumerate(warm):
        report = WarmReport(state="READY", port=41000 + n, container_id=f"c{n}")
        do_warm_report(desktop.node, desktop.key, report)
    return course, booking, people


def submit(people, profile, code: str) -> list[Session]:
    return [do_submit(p, check_submit(p, profile.pk, "coursework", code)) for p in people]


def warm_slices(booking: Booking) -> dict[str, int]:
    """The booking's warm desktops now: key -> the slice each holds."""
    return {
        w.key: h.slice_id
        for w in WarmDesktop.objects.filter(booking=booking)
        for h in Allocation.objects.filter(warm=w, released_at=None)
    }


def assert_claimed(
    session: Session, booking: Booking, slices: dict[str, int], node: Node, *, together=True
):
    """Placed on one of the booking's READY warm desktops, as one claim by itself was.
    (The transition's event names the node placed on when placed together, as
    ``do_transition_many`` writes it; the node it was on, none, when placed alone.)"""
    session.refresh_from_db()
    assert session.state == S.PLACED and session.node_id == node.pk
    assert session.warm_key in slices and session.reason_code == "placed_warm"
    assert session.compute_units > 0 and len(session.vnc_password) == 8
    assert session.queue_position is None and session.placed_at is not None
    [hold] = Allocation.objects.filter(session=session, released_at=None)
    assert hold.slice_id == slices[session.warm_key] and hold.warm_id is None
    [moved] = AuditEvent.objects.filter(
        session=session, kind=AuditKind.SESSION_TRANSITION, data__to="PLACED"
    )
    on = node.pk if together else None
    assert (moved.actor, moved.node_id, moved.data["from"]) == ("scheduler", on, "QUEUED")
    assert moved.data["reason_code"] == "placed_warm"
    [event] = AuditEvent.objects.filter(session=session, kind=AuditKind.SESSION_PLACED)
    assert (event.actor, event.node_id) == ("scheduler", node.pk)
    assert event.data == {
        "slices": [hold.slice_id],
        "nodes": [node.pk],
        "warm_key": session.warm_key,
        "booking": booking.pk,
    }


def test_a_class_s_claims_are_applied_together_in_the_same_number_of_queries(
    settings, make_user, profile, register_node, monkeypatch, django_capture_on_commit_callbacks
):
    settings.WARM_MAX_PER_BOOKING = None
    node, _ = register_node(
        "warm-1",
        [
            gpu_inventory("GPU-w0", 0, mig_slices=7),
            gpu_inventory("GPU-w1", 1, mig_slices=7),
            gpu_inventory("GPU-w2", 2, mig_slices=2),
        ],
    )
    small = ready_class(make_user, profile, "cs3", 3)
    large = ready_class(make_user, profile, "cs12", 12)
    counts: list[tuple[int, int]] = []
    wakes: list[list[int]] = []
    sent: list[tuple[str, dict]] = []
    claim_warm = warm_service.claim_warm
    monkeypatch.setattr(agent_wake, "_wake", wakes.append)
    monkeypatch.setattr(
        "scheduling.events._send", lambda group, payload: sent.append((group, payload))
    )

    def counted(snapshot, now):
        wakes.clear()
        sent.clear()
        with (
            django_capture_on_commit_callbacks(execute=True),
            CaptureQueriesContext(connection) as queries,
        ):
            claimed = claim_warm(snapshot, now)
        counts.append((len(claimed), len(queries)))
        return claimed

    monkeypatch.setattr(warm_service, "claim_warm", counted)
    for course, booking, people in (small, large):
        slices = warm_slices(booking)
        sessions = submit(people, profile, course.code)
        assert do_scheduling_cycle().placed == len(people)
        for session in sessions:
            assert_claimed(session, booking, slices, node)
        keys = Session.objects.filter(pk__in=[s.pk for s in sessions]).values_list(
            "warm_key", flat=True
        )
        assert sorted(keys) == sorted(slices)  # each warm desktop claimed once
        assert not WarmDesktop.objects.filter(booking=booking).exists()
        # The agent is woken once for all of them; the class hears of them in one message.
        assert wakes == [[node.pk]]
        [notice] = [p for g, p in sent if p["type"] == "class.sessions"]
        assert set(notice["sessions"]) >= {s.pk for s in sessions}
        updates = {p["session"]["id"] for g, p in sent if p["type"] == "session.update"}
        assert updates >= {s.pk for s in sessions}
    assert [n for n, _ in counts] == [3, 12]
    assert counts[0][1] == counts[1][1], counts


def test_a_course_quota_limits_the_claims(settings, make_user, profile, register_node):
    settings.WARM_MAX_PER_BOOKING = None
    register_node("warm-q", [gpu_inventory("GPU-q", 0, mig_slices=4)])
    course, booking, people = ready_class(make_user, profile, "cs-q", 4)
    Quota.objects.create(scope="course", key="cs-q", max_sessions=2)
    sessions = submit(people, profile, "cs-q")

    claimed = do_scheduling_cycle().placed

    states = dict(
        Session.objects.filter(pk__in=[s.pk for s in sessions]).values_list("pk", "state")
    )
    assert claimed == 2
    # The first two to ask get warm desktops; the others wait for the course's quota.
    assert [states[s.pk] for s in sessions] == [S.PLACED, S.PLACED, S.QUEUED, S.QUEUED]
    assert WarmDesktop.objects.filter(booking=booking).count() == 2


@pytest.mark.parametrize("race", ["hold taken", "cancelled"])
def test_a_claim_that_raced_is_skipped_and_the_others_applied_one_by_one(
    race, settings, make_user, profile, register_node, monkeypatch
):
    """Between the decision and the batch, one warm desktop's hold went to another session
    (or one of the students cancelled): the claims together fail, then each is applied on
    its own and only that one is skipped; the pool has no other slice for it to take."""
    settings.WARM_MAX_PER_BOOKING = None
    node, _ = register_node("warm-r", [gpu_inventory("GPU-r", 0, mig_slices=4)])
    course, booking, people = ready_class(make_user, profile, "cs-r", 4, students=5)
    slices = warm_slices(booking)
    first, raced, *others = submit(people[:4], profile, "cs-r")
    claim_many = warm_service.claim_many
    tries: list[int] = []

    def raced_meanwhile(picks):
        [warm] = [w for s, w in picks if s == raced.pk]
        if race == "hold taken":
            latecomer = submit(people[4:], profile, "cs-r")[0]
            Session.objects.filter(pk=latecomer.pk).update(state=S.PLACED, node=node)
            Allocation.objects.filter(warm=warm).update(session=latecomer, warm=None)
        else:
            Session.objects.filter(pk=raced.pk).update(state=S.CANCELLED)
        tries.append(len(picks))
        return claim_many(picks)

    monkeypatch.setattr(warm_service, "claim_many", raced_meanwhile)
    result = do_scheduling_cycle()

    assert tries == [4] and (result.placed, result.conflicts) == (3, 0)
    for session in (first, *others):
        assert_claimed(session, booking, slices, node, together=False)
    raced.refresh_from_db()
    assert raced.state == (S.QUEUED if race == "hold taken" else S.CANCELLED)
    assert raced.warm_key == "" and raced.node_id is None
    assert not Allocation.objects.filter(session=raced).exists()
    assert not AuditEvent.objects.filter(session=raced, kind=AuditKind.SESSION_PLACED).exists()
