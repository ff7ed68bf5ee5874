"""A booked class starts at once: ``bench.class_start`` at 8 seats, checked for correctness.

Every real part (daphne, Celery worker, agent process, dockerd, the tiny image). Eight
students of a booked class ask within one second of the window opening, after the worker
has started a warm desktop for each seat. Only correctness is asserted: every student gets
exactly one session and it reaches RUNNING, every warm desktop is claimed (or, when the
class ends, removed) and no container is left behind. The times are printed, not asserted
(``python -m bench.class_start`` is the benchmark; docs/measurements.md has its figures).
"""

from __future__ import annotations

from collections import Counter

import pytest

from bench.class_start import bench_profile, end_class, release_warm_homes, report, run_class
from scheduling.models import Session, WarmDesktop

from ..conftest import TEST_IMAGE
from .stack import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.docker]

SEATS = 8


@pytest.fixture
def stack_options() -> dict:
    # A warm desktop for every seat (the default caps a booking at 5).
    return {"node": "class-node", "extra_env": {"DESKPOOL_WARM_MAX_PER_BOOKING": str(SEATS)}}


def test_every_student_of_a_booked_class_runs_once_and_nothing_is_left(
    stack, docker_engine, require_image, tmp_path
):
    require_image(TEST_IMAGE)
    stack.remove_volumes = True
    try:
        run = run_class(
            stack, bench_profile(TEST_IMAGE), tmp_path, seats=SEATS, code="cs-class", opens_in_s=30
        )
        print("", *report(run, 1.0), sep="\n")

        # Every student asked once and got exactly one session, RUNNING.
        assert [s.error for s in run.students] == [""] * SEATS
        assert all(s.running is not None for s in run.students)
        sessions = Session.objects.filter(course=run.course)
        assert Counter(sessions.values_list("user__username", flat=True)) == Counter(
            {s.user.username: 1 for s in run.students}
        )
        assert set(sessions.values_list("state", flat=True)) == {"RUNNING"}
        assert all(s.states.count("RUNNING") == 1 for s in run.students if s.via == "ws")

        # One container per session and no other: each warm desktop was claimed by a session
        # or removed. (The portal placed every session on a READY warm desktop; should the
        # agent have started one afresh instead, that is slower, not wrong: it is printed.)
        containers = stack.node_containers(docker_engine)
        assert [c.status for c in containers] == ["running"] * SEATS
        session_containers = list(sessions.values_list("container_id", flat=True))
        assert sorted(session_containers) == sorted(c.id for c in containers)
        assert run.warm_started == SEATS
        assert run.placed_warm == SEATS
        assert not WarmDesktop.objects.filter(booking=run.booking).exists()
        taken_over = sum(1 for c in containers if c.labels.get("deskpool.warm"))
        print(f"sessions running in a warm desktop's container: {taken_over} of {SEATS}")

        # The class ends: every container goes, none is left for the stack to remove.
        assert end_class(stack, run, docker_engine, timeout_s=60) == []
        assert not WarmDesktop.objects.exists()
        # The agent reports each end (a report that fails is kept and sent again).
        wait_for(
            lambda: set(sessions.values_list("state", flat=True)) == {"ENDED"},
            30,
            "every session of the class to be reported ENDED",
        )
    finally:
        stack.close(docker_engine)
        release_warm_homes(tmp_path)
