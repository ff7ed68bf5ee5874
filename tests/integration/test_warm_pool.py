"""The warm pool with every real part: portal (daphne), Celery worker, agent process, dockerd.

An instructor's booking gets warm desktops from the worker's cycle; the agent starts them
and reports them READY; a student of the class asks through the API and gets one of those
running containers, opened by their own VNC password. Prints the student's ask → RUNNING.
"""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from nodeagent.images.check_image import handshake
from people.models import Course
from scheduling.models import Node, Session, WarmDesktop, WarmState
from scheduling.services.bookings import check_booking, do_create_booking
from scheduling.services.nodes import do_create_join_token

from ..conftest import TEST_IMAGE
from .stack import wait_for, write_fleet
from .test_end_to_end import api_client

pytestmark = [pytest.mark.integration, pytest.mark.docker]


def test_a_booked_student_gets_a_running_warm_desktop(
    stack, owner, make_user, profile, docker_engine, require_image, tmp_path
):
    require_image(TEST_IMAGE)
    course = Course.objects.create(code="cs101", title="Intro", department="cs")
    course.students.add(owner)
    teacher = make_user("prof")
    course.instructors.add(teacher)
    stack.start_agent(
        do_create_join_token(stack.node, actor="test"),
        write_fleet(tmp_path / "fleet.yaml", stack.node, 4),
    )
    wait_for(
        lambda: Node.objects.filter(hostname=stack.node, last_heartbeat__isnull=False).exists(),
        30,
        "the agent's registration and heartbeat",
    )
    start = timezone.now() - timedelta(minutes=1)
    do_create_booking(
        teacher, check_booking(teacher, "cs101", profile.pk, 2, start, start + timedelta(hours=1))
    )
    wait_for(
        lambda: WarmDesktop.objects.filter(state=WarmState.READY).count() == 2 or None,
        60,
        "two READY warm desktops",
    )
    warm_ids = {c.id for c in stack.node_containers(docker_engine)}
    assert len(warm_ids) == 2
    assert all(c.labels.get("deskpool.warm") for c in stack.node_containers(docker_engine))

    client = api_client(stack, "ada")
    asked = time.monotonic()
    created = client.post(
        "/api/v1/sessions/",
        json={"profile": profile.pk, "purpose": "coursework", "course": "cs101"},
    )
    assert created.status_code == 201, created.text
    session_id = created.json()["id"]

    def running():
        state = Session.objects.filter(pk=session_id).values_list("state", flat=True).get()
        assert state not in ("FAILED", "LOST"), state
        return state == "RUNNING" or None

    wait_for(running, 60, "RUNNING")
    elapsed = time.monotonic() - asked
    print(f"\nwarm pool: student's ask -> RUNNING in {elapsed:.2f} s (poll interval 0.25 s)")

    session = Session.objects.get(pk=session_id)
    assert session.warm_key and session.container_id in warm_ids  # a warm one, not a new one
    url = f"ws://127.0.0.1:{session.desktop_port}/websockify"
    assert asyncio.run(handshake(url, session.vnc_password))[2] == "OK"
    assert asyncio.run(handshake(url, "wrongpw1"))[2].startswith("FAILED")
    # One seat left: the other warm desktop stays for it.
    assert {c.id for c in stack.node_containers(docker_engine)} == warm_ids
