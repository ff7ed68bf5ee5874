"""The warm pool on the portal: which bookings get warm desktops, claims, cancellation, retries.

Real PostgreSQL and the real engine; the pool is the conftest's ten slices. The agent side is
played through the agent API (``desired/`` and ``warm/<key>/report/``).
"""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone
from rest_framework.test import APIClient

from people.models import Course
from scheduling.choices import SessionState
from scheduling.models import Allocation, Booking, WarmDesktop, WarmState
from scheduling.services import agent_sessions
from scheduling.services.cycle import do_scheduling_cycle
from scheduling.services.sessions import check_submit, do_submit
from scheduling.services.warm import desired_warm

from ..conftest import gpu_inventory

pytestmark = pytest.mark.django_db

S = SessionState


@pytest.fixture
def agent_token(register_node) -> str:
    _, token = register_node(
        "node-1",
        [
            gpu_inventory("GPU-a", 0, mig_slices=4),
            gpu_inventory("GPU-b", 1, mig_slices=4),
            gpu_inventory("GPU-c", 2, shares=2),
        ],
    )
    return token


def agent(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Node " + token)
    return client


@pytest.fixture
def course(make_user, owner):
    course = Course.objects.create(code="cs101", title="Intro", department="cs")
    course.instructors.add(make_user("prof"))
    course.students.add(owner)
    return course


def book(course, profile, seats: int, starts_in: timedelta, hours: float = 2) -> Booking:
    start = timezone.now() + starts_in
    return Booking.objects.create(
        course=course,
        profile=profile,
        seats=seats,
        starts_at=start,
        ends_at=start + timedelta(hours=hours),
    )


def desired(token: str) -> dict:
    answer = agent(token).get("/api/agent/v1/desired/")
    assert answer.status_code == 200
    return answer.json()


def warm_keys(token: str, booking: Booking | None = None) -> set[str]:
    return {
        w["key"] for w in desired(token)["warm"] if booking is None or w["booking"] == booking.pk
    }


def report_warm(token: str, key: str, state: str, **fields):  # type: ignore[no-untyped-def]
    return agent(token).post(
        f"/api/agent/v1/warm/{key}/report/", {"state": state, **fields}, format="json"
    )


def test_warm_entries_only_for_bookings_in_or_near_their_window(
    settings, course, profile, agent_token
):
    settings.WARM_LEAD_MINUTES = 10
    settings.WARM_MAX_PER_BOOKING = 2
    far = book(course, profile, 4, timedelta(hours=2))
    near = book(course, profile, 3, timedelta(minutes=5))
    open_ = book(course, profile, 1, timedelta(minutes=-5))
    over = book(course, profile, 1, timedelta(hours=-3))  # ended an hour ago

    do_scheduling_cycle()

    answer = desired(agent_token)
    assert answer["sessions"] == []
    by_booking: dict[int, list[dict]] = {}
    for entry in answer["warm"]:
        by_booking.setdefault(entry["booking"], []).append(entry)
    # min(seats not taken, cap) for near and open bookings; none for the far and ended ones.
    assert {b: len(v) for b, v in by_booking.items()} == {near.pk: 2, open_.pk: 1}
    assert far.pk not in by_booking and over.pk not in by_booking
    entries = answer["warm"]
    entry = entries[0]
    assert entry["image"] == profile.image and entry["course"] == "cs101"
    assert (entry["cpus"], entry["memory_mb"]) == (profile.cpus, profile.memory_mb)
    devices = [d for e in entries for d in e["gpu_devices"]]
    assert len(devices) == 3 and len(set(devices)) == 3  # one slice each, all different
    # Their slices are the booking's: held by the warm desktops, by no session.
    holds = Allocation.objects.filter(slice__device_uuid__in=devices, released_at=None)
    assert holds.count() == 3 and not holds.filter(session__isnull=False).exists()

    # Stable: the next cycle keeps the same warm desktops.
    do_scheduling_cycle()
    assert {e["key"] for e in desired(agent_token)["warm"]} == {e["key"] for e in entries}

    # The far booking comes within the lead time: it gets its warm desktops then.
    Booking.objects.filter(pk=far.pk).update(starts_at=timezone.now() + timedelta(minutes=9))
    do_scheduling_cycle()
    assert len(warm_keys(agent_token, far)) == 2
    # Its window ends: they go.
    Booking.objects.filter(pk=far.pk).update(
        starts_at=timezone.now() - timedelta(hours=2), ends_at=timezone.now()
    )
    assert warm_keys(agent_token, far) == set()  # at once, in the answer
    do_scheduling_cycle()
    assert not WarmDesktop.objects.filter(booking=far).exists()


def test_a_booked_student_is_placed_on_a_ready_warm_slice_and_the_entry_carries_the_key(
    settings, make_user, course, owner, profile, agent_token
):
    settings.WARM_MAX_PER_BOOKING = 5
    booking = book(course, profile, 2, timedelta(minutes=-1))
    do_scheduling_cycle()
    keys = warm_keys(agent_token, booking)
    assert len(keys) == 2
    ready_key, other_key = sorted(keys)
    ready = WarmDesktop.objects.get(key=ready_key)
    ready_slice = ready.held_slice
    assert ready_slice is not None
    answer = report_warm(agent_token, ready_key, "READY", port=40001, container_id="c0ffee")
    assert answer.status_code == 200 and answer.json() == {"state": "READY"}

    seat = do_submit(owner, check_submit(owner, profile.pk, "coursework", "cs101"))
    assert seat.booking_id == booking.pk
    do_scheduling_cycle()

    seat.refresh_from_db()
    assert seat.state == S.PLACED and seat.warm_key == ready_key
    [allocation] = Allocation.objects.filter(session=seat, released_at=None)
    assert allocation.slice_id == ready_slice.pk and seat.node_id == ready.node_id
    answer = desired(agent_token)
    [entry] = answer["sessions"]
    assert entry["session_id"] == seat.pk and entry["warm_key"] == ready_key
    assert entry["gpu_devices"] == [ready_slice.device_uuid]
    assert len(entry["vnc_password"]) == 8
    # The claimed desktop is no longer a warm one; the other seat's still is.
    assert {w["key"] for w in answer["warm"]} == {other_key}
    assert not WarmDesktop.objects.filter(key=ready_key).exists()

    # A second student finds no READY warm desktop: placed on the slice of the booking's
    # STARTING one, without its key (the agent stops that warm desktop and starts theirs
    # afresh), so warm desktops never keep a class from its seats.
    other = WarmDesktop.objects.get(key=other_key)
    other_slice = other.held_slice
    assert other_slice is not None
    classmate = make_user("cleo")
    course.students.add(classmate)
    second = do_submit(classmate, check_submit(classmate, profile.pk, "coursework", "cs101"))
    do_scheduling_cycle()
    second.refresh_from_db()
    assert second.state == S.PLACED and second.warm_key == ""
    [allocation] = Allocation.objects.filter(session=second, released_at=None)
    assert allocation.slice_id == other_slice.pk
    [entry] = [s for s in desired(agent_token)["sessions"] if s["session_id"] == second.pk]
    assert "warm_key" not in entry
    assert warm_keys(agent_token) == set()  # both seats taken: no warm desktop left
    assert not WarmDesktop.objects.exists()


def test_cancelling_the_booking_drops_its_warm_entries(course, profile, agent_token):
    booking = book(course, profile, 3, timedelta(minutes=3))
    do_scheduling_cycle()
    keys = warm_keys(agent_token, booking)
    assert len(keys) == 3

    client = APIClient()
    client.force_authenticate(course.instructors.get())
    assert client.post(f"/api/v1/bookings/{booking.pk}/cancel/").status_code == 200

    assert desired(agent_token)["warm"] == []
    assert not WarmDesktop.objects.exists()
    # The agent's late READY for one of them is refused: it must stop that desktop.
    late = report_warm(agent_token, sorted(keys)[0], "READY", port=40002)
    assert late.status_code == 409
    do_scheduling_cycle()
    assert desired(agent_token)["warm"] == []


def test_a_failed_warm_start_is_retried_later_with_a_new_key(
    settings, course, profile, agent_token, pool_node
):
    settings.WARM_RETRY_S = 60
    booking = book(course, profile, 1, timedelta(minutes=2))
    do_scheduling_cycle()
    [key] = warm_keys(agent_token, booking)

    failed = report_warm(agent_token, key, "FAILED", reason="image missing")
    assert failed.status_code == 200 and failed.json() == {"state": "FAILED"}
    row = WarmDesktop.objects.get(key=key)
    assert row.state == WarmState.FAILED and row.failures == 1 and row.reason == "image missing"
    # Not in the answer, and not retried by the next cycles before its time.
    assert warm_keys(agent_token, booking) == set()
    do_scheduling_cycle()
    assert warm_keys(agent_token, booking) == set()
    assert WarmDesktop.objects.count() == 1  # its slice stays the booking's meanwhile

    later = timezone.now() + timedelta(seconds=61)
    type(pool_node).objects.filter(pk=pool_node.pk).update(last_heartbeat=later)
    do_scheduling_cycle(now=later)
    [retry] = desired_warm(pool_node, later)
    assert retry.key != key and retry.gpu_devices == [row.held_slice.device_uuid]
    # A second failure waits twice as long.
    assert report_warm(agent_token, retry.key, "FAILED").status_code == 200
    assert WarmDesktop.objects.get().retry_at >= timezone.now() + timedelta(seconds=119)


def test_warm_reports_about_unknown_keys_or_from_another_node_are_refused(
    course, profile, agent_token, register_node
):
    booking = book(course, profile, 1, timedelta(minutes=2))
    do_scheduling_cycle()
    [key] = warm_keys(agent_token, booking)
    _, other_token = register_node("node-2", [gpu_inventory("GPU-z", 0, mig_slices=1)])

    assert report_warm(agent_token, "b1-nosuchkey", "READY").status_code == 409
    assert report_warm(other_token, key, "READY").status_code == 409
    assert report_warm(agent_token, key, "RUNNING").status_code == 400
    assert WarmDesktop.objects.get(key=key).state == WarmState.STARTING


@pytest.fixture
def pool_node(agent_token):  # type: ignore[no-untyped-def]
    from scheduling.models import Node

    return Node.objects.get(hostname="node-1")


def test_by_default_the_warm_pool_covers_every_seat_of_a_booking(
    settings, course, profile, agent_token
):
    settings.WARM_MAX_PER_BOOKING = None  # the default: DESKPOOL_WARM_MAX_PER_BOOKING unset
    booking = book(course, profile, 7, timedelta(minutes=5))
    do_scheduling_cycle()
    assert len(warm_keys(agent_token, booking)) == 7
    assert WarmDesktop.objects.filter(booking=booking).count() == 7


def test_a_cap_of_zero_turns_the_warm_pool_off(settings, course, profile, agent_token):
    settings.WARM_MAX_PER_BOOKING = 0
    booking = book(course, profile, 3, timedelta(minutes=5))
    do_scheduling_cycle()
    assert warm_keys(agent_token, booking) == set()


@pytest.mark.django_db(transaction=True)
def test_a_claim_between_the_two_reads_of_the_desired_state_keeps_the_warm_desktop_listed(
    settings, course, owner, profile, agent_token, monkeypatch
):
    """The agent's desired state lists sessions and warm desktops; a claim that commits
    between the two reads must not leave the claimed desktop in neither list (the agent
    would stop it and start the session cold). Both are read from one snapshot."""
    settings.WARM_MAX_PER_BOOKING = 5
    booking = book(course, profile, 1, timedelta(minutes=-1))
    do_scheduling_cycle()
    [key] = warm_keys(agent_token, booking)
    assert (
        report_warm(agent_token, key, "READY", port=40001, container_id="c0ffee").status_code == 200
    )
    seat = do_submit(owner, check_submit(owner, profile.pk, "coursework", "cs101"))

    read_sessions = agent_sessions.desired_sessions

    def sessions_then_a_claim(node):
        listed = read_sessions(node)
        claim = threading.Thread(target=claim_in_its_own_connection)
        claim.start()
        claim.join()
        return listed

    def claim_in_its_own_connection():
        try:
            do_scheduling_cycle()
        finally:
            connection.close()

    monkeypatch.setattr(agent_sessions, "desired_sessions", sessions_then_a_claim)
    answer = desired(agent_token)
    seat.refresh_from_db()
    assert seat.warm_key == key  # the claim did commit between the reads
    sessions = {s["session_id"] for s in answer["sessions"]}
    warm = {w["key"] for w in answer["warm"]}
    assert seat.pk in sessions or key in warm, "the claimed desktop is in neither list"
