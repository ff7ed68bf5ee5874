"""Warm seats where the class's homes are (issue 36): a booking's warm desktops go to the nodes
that keep its students' homes when those nodes fit as well as others, one seat per home, and
elsewhere when they are full; at claim, a student takes a warm desktop on the node that keeps
their home when one is there. Real PostgreSQL, the real engine and cycle."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

import pytest
from django.utils import timezone

from people.models import Course
from scheduling.choices import SessionState
from scheduling.models import Booking, DesktopProfile, Node, Session, UsageRecord, WarmDesktop
from scheduling.services.cycle import do_scheduling_cycle
from scheduling.services.home_place import booking_home_nodes
from scheduling.services.sessions import check_submit, do_submit
from scheduling.services.warm import do_warm_report

from ..conftest import TEST_IMAGE, gpu_inventory

pytestmark = pytest.mark.django_db


def mig_node(register_node, hostname: str, slices: int, shared: bool = False) -> Node:  # type: ignore[no-untyped-def]
    node, _ = register_node(hostname, [gpu_inventory(f"GPU-{hostname}", 0, mig_slices=slices)])
    Node.objects.filter(pk=node.pk).update(home_root_shared=shared)
    return Node.objects.get(pk=node.pk)


@pytest.fixture
def cpu_profile(db) -> DesktopProfile:  # type: ignore[no-untyped-def]
    return DesktopProfile.objects.create(
        slug="cpu-desktop",
        name="CPU-only desktop",
        image=TEST_IMAGE,
        cpus=1.0,
        memory_mb=1024,
        gpu_count=0,
        gpu_memory_min_mb=0,
        allowed_kinds=[],
        pids_limit=256,
        shm_mb=64,
    )


@pytest.fixture
def course(make_user) -> Course:  # type: ignore[no-untyped-def]
    course = Course.objects.create(code="cs101", title="Intro", department="cs")
    course.instructors.add(make_user("prof"))
    return course


def student(make_user, course: Course, name: str, home: Node | None = None):  # type: ignore[no-untyped-def]
    """An enrolled student; with ``home``, their latest desktop ran there (so their home is
    kept there, where that node keeps homes to itself)."""
    user = make_user(name)
    course.students.add(user)
    if home is not None:
        start = timezone.now() - timedelta(days=1)
        UsageRecord.objects.create(
            user=user,
            username=name,
            purpose="coursework",
            profile_slug="painting",
            node_hostname=home.hostname,
            started_at=start,
            ended_at=start + timedelta(minutes=30),
        )
    return user


def book(course: Course, profile: DesktopProfile, seats: int) -> Booking:
    start = timezone.now() + timedelta(minutes=5)  # within the warm lead (10 min)
    return Booking.objects.create(
        course=course,
        profile=profile,
        seats=seats,
        starts_at=start,
        ends_at=start + timedelta(hours=2),
    )


def warm_nodes(booking: Booking) -> Counter[str]:
    return Counter(
        WarmDesktop.objects.filter(booking=booking).values_list("node__hostname", flat=True)
    )


@pytest.mark.parametrize("shared", [False, True])
def test_warm_seats_go_to_the_node_that_keeps_most_of_the_class_homes(
    register_node, make_user, course, profile, shared: bool
):
    mig_node(register_node, "gpu-a", 4)  # the lower id: it wins every tie on its own
    homes = mig_node(register_node, "gpu-b", 4, shared=shared)
    for name in ("ada", "ben", "cy"):
        student(make_user, course, name, home=homes)
    student(make_user, course, "dee")  # never ran a desktop: no home anywhere

    booking = book(course, profile, 2)
    do_scheduling_cycle()

    if shared:  # every sharing node has those homes: no preference, the tie goes to gpu-a
        assert warm_nodes(booking) == {"gpu-a": 2}
        assert booking_home_nodes([booking]) == {}
    else:
        assert warm_nodes(booking) == {"gpu-b": 2}


def test_control_without_homes_the_seats_go_to_the_first_node(
    register_node, make_user, course, profile
):
    mig_node(register_node, "gpu-a", 4)
    mig_node(register_node, "gpu-b", 4)
    for name in ("ada", "ben"):
        student(make_user, course, name)

    booking = book(course, profile, 2)
    do_scheduling_cycle()

    assert warm_nodes(booking) == {"gpu-a": 2}


def test_cpu_only_seats_follow_the_homes_one_seat_per_home(
    register_node, make_user, course, cpu_profile
):
    a = mig_node(register_node, "gpu-a", 1)
    b = mig_node(register_node, "gpu-b", 1)
    student(make_user, course, "ada", home=b)
    student(make_user, course, "ben", home=b)
    student(make_user, course, "cy", home=a)
    booking = book(course, cpu_profile, 3)
    assert booking_home_nodes([booking]) == {booking.pk: ((b.pk, 2), (a.pk, 1))}

    do_scheduling_cycle()

    assert warm_nodes(booking) == {"gpu-b": 2, "gpu-a": 1}
    # Seated there now: the next cycle's counts are what is still missing (nothing).
    assert booking_home_nodes([booking]) == {}
    do_scheduling_cycle()
    assert warm_nodes(booking) == {"gpu-b": 2, "gpu-a": 1}  # stable


def test_a_full_home_node_leaves_the_seats_elsewhere(register_node, make_user, course, profile):
    mig_node(register_node, "gpu-a", 4)
    homes = mig_node(register_node, "gpu-b", 1)  # one slice: one seat
    for name in ("ada", "ben", "cy"):
        student(make_user, course, name, home=homes)

    booking = book(course, profile, 3)
    do_scheduling_cycle()

    assert warm_nodes(booking) == {"gpu-b": 1, "gpu-a": 2}


def ready_warm_on_each(register_node, course, profile) -> tuple[Booking, Node, Node]:  # type: ignore[no-untyped-def]
    """Two nodes of one slice each, a booking of two seats: a READY warm desktop on each,
    gpu-a's ready first (the order a claim without a home takes them in)."""
    a = mig_node(register_node, "gpu-a", 1)
    b = mig_node(register_node, "gpu-b", 1)
    booking = book(course, profile, 2)
    do_scheduling_cycle()
    assert warm_nodes(booking) == {"gpu-a": 1, "gpu-b": 1}
    for node, port in ((a, 40001), (b, 40002)):
        warm = WarmDesktop.objects.get(booking=booking, node=node)
        do_warm_report(node, warm.key, {"state": "READY", "port": port, "container_id": "c"})
    return booking, a, b


def coursework(user, profile) -> Session:  # type: ignore[no-untyped-def]
    return do_submit(user, check_submit(user, profile.pk, "coursework", "cs101"))


def test_a_student_claims_the_warm_seat_on_the_node_that_keeps_their_home(
    register_node, make_user, course, profile
):
    booking, a, b = ready_warm_on_each(register_node, course, profile)
    cy = student(make_user, course, "cy", home=b)
    Booking.objects.filter(pk=booking.pk).update(starts_at=timezone.now())  # the class begins

    # gpu-a's seat was ready first (a student without a home takes it: the next test), but
    # cy's home is on gpu-b, and gpu-b has a warm seat of the same state.
    seat = coursework(cy, profile)
    do_scheduling_cycle()
    seat.refresh_from_db()

    assert seat.state == SessionState.PLACED
    assert seat.node_id == b.pk and seat.warm_key
    assert list(WarmDesktop.objects.filter(booking=booking).values_list("node", flat=True)) == [
        a.pk
    ]


def test_the_home_seat_goes_to_its_student_even_when_another_asked_first(
    register_node, make_user, course, profile
):
    booking, a, b = ready_warm_on_each(register_node, course, profile)
    ada = student(make_user, course, "ada")
    ben = student(make_user, course, "ben", home=a)
    Booking.objects.filter(pk=booking.pk).update(starts_at=timezone.now())

    # ada asks first and has no home: without ben's, she would take gpu-a's seat.
    first, second = coursework(ada, profile), coursework(ben, profile)
    do_scheduling_cycle()
    first.refresh_from_db()
    second.refresh_from_db()

    assert second.node_id == a.pk and second.warm_key
    assert first.node_id == b.pk and first.warm_key


def test_without_a_warm_seat_on_the_home_node_the_student_takes_another(
    register_node, make_user, course, profile
):
    booking, a, b = ready_warm_on_each(register_node, course, profile)
    ada = student(make_user, course, "ada", home=b)
    ben = student(make_user, course, "ben", home=b)
    Booking.objects.filter(pk=booking.pk).update(starts_at=timezone.now())

    # Both keep their homes on gpu-b, which has one warm seat: the first to ask gets it, the
    # other the seat on gpu-a (a warm desktop, not a wait for the home's node).
    first, second = coursework(ada, profile), coursework(ben, profile)
    do_scheduling_cycle()
    first.refresh_from_db()
    second.refresh_from_db()

    assert first.node_id == b.pk and first.warm_key
    assert second.node_id == a.pk and second.warm_key
    assert not WarmDesktop.objects.filter(booking=booking).exists()
