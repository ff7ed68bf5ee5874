"""The warm pool end to end in one process: the real agent (DockerRuntime, tiny image) talks to
the real agent API (Django's test client behind an httpx transport, PostgreSQL), and the real
scheduling cycle decides. A class booking gets warm desktops, a student's request claims one,
their password opens it, and cancelling the booking stops the unclaimed one.
"""

from __future__ import annotations

import asyncio
import threading
from datetime import timedelta
from pathlib import Path

import httpx
import pytest

import nodeagent
from nodeagent.agent import Agent
from nodeagent.config import AgentConfig
from nodeagent.images.check_image import handshake
from nodeagent.portal_client import PortalClient
from nodeagent.probe.simulated import SimulatedProbe, load_fleet
from nodeagent.protocol import LABEL_MANAGED, LABEL_NODE, LABEL_WARM
from nodeagent.runtime.docker_runtime import DockerRuntime

DEMO_FLEET = Path(nodeagent.__file__).parent / "fleets" / "demo.yaml"

pytestmark = [pytest.mark.docker, pytest.mark.django_db(transaction=True)]


def django_transport() -> httpx.MockTransport:
    """Hand the agent's HTTP requests to the portal's views, in process."""
    from django.db import connections
    from django.test import Client

    def handle(request: httpx.Request) -> httpx.Response:
        client = Client()
        headers = {}
        if auth := request.headers.get("Authorization"):
            headers["HTTP_AUTHORIZATION"] = auth
        if request.method == "GET":
            answer = client.get(request.url.path, **headers)
        else:
            answer = client.generic(
                request.method,
                request.url.path,
                request.content,
                content_type="application/json",
                **headers,
            )
        if threading.current_thread() is not threading.main_thread():
            connections.close_all()  # the reconciler's worker threads: no lingering sessions
        return httpx.Response(
            answer.status_code,
            content=answer.content,
            headers={"Content-Type": answer.get("Content-Type", "application/json")},
        )

    return httpx.MockTransport(handle)


def login(port: int, password: str) -> str:
    return asyncio.run(handshake(f"ws://127.0.0.1:{port}/websockify", password))[2]


def test_a_booked_student_gets_a_warm_desktop_through_the_real_agent_and_portal(
    docker_client, tiny_image, node_name, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from people.models import Course
    from scheduling.choices import SessionState
    from scheduling.models import Booking, DesktopProfile, Session, WarmDesktop, WarmState
    from scheduling.services.bookings import do_cancel_booking
    from scheduling.services.cycle import do_scheduling_cycle
    from scheduling.services.nodes import do_create_join_token
    from scheduling.services.sessions import check_submit, do_submit

    users = get_user_model().objects
    student, teacher = users.create_user("stu"), users.create_user("teach")
    course = Course.objects.create(code="cs101", title="Intro", department="cs")
    course.students.add(student)
    course.instructors.add(teacher)
    profile = DesktopProfile.objects.create(
        slug="lab", name="Lab", image=tiny_image, cpus=0.5, memory_mb=256, gpu_count=1,
        gpu_memory_min_mb=4000, allowed_kinds=["mig"], pids_limit=256, shm_mb=64,
    )  # fmt: skip
    config = AgentConfig(
        node_name=node_name, state_dir=tmp_path, fleet_file=DEMO_FLEET, runtime="docker",
        join_token=do_create_join_token(node_name, actor="test"), poll_interval_s=0.01,
        ready_timeout_s=30,
    )  # fmt: skip
    runtime = DockerRuntime(
        docker_client, node_name=node_name, sessions_dir=config.sessions_dir(), ready_timeout_s=30
    )

    def agent_round() -> None:
        """One round of a freshly started agent (``run(once=True)`` closes its reconciler),
        so every round after the first also adopts what the one before left running."""
        agent = Agent(
            config,
            client=PortalClient("http://portal.test", transport=django_transport()),
            probe=SimulatedProbe(load_fleet(DEMO_FLEET).node("gpu-a01")),
            runtime=runtime,
        )
        agent.run(once=True)

    def containers() -> dict[str, str]:
        labels = [f"{LABEL_MANAGED}=true", f"{LABEL_NODE}={node_name}"]
        found = docker_client.containers.list(all=True, filters={"label": labels})
        return {c.id: c.labels.get(LABEL_WARM, "") for c in found}

    agent_round()  # registers with the join token
    start = timezone.now() + timedelta(minutes=3)
    booking = Booking.objects.create(
        course=course, profile=profile, seats=2, starts_at=start, ends_at=start + timedelta(hours=1)
    )
    do_scheduling_cycle()
    agent_round()  # starts both warm desktops and reports them READY

    warm = list(WarmDesktop.objects.order_by("pk"))
    assert [w.state for w in warm] == [WarmState.READY, WarmState.READY]
    assert sorted(containers().values()) == sorted(w.key for w in warm)

    # The class starts; a student asks and is placed on a READY warm desktop.
    Booking.objects.filter(pk=booking.pk).update(starts_at=timezone.now())
    seat = do_submit(student, check_submit(student, profile.pk, "coursework", "cs101"))
    do_scheduling_cycle()
    seat.refresh_from_db()
    claimed = next(w for w in warm if w.key == seat.warm_key)
    assert seat.state == SessionState.PLACED
    agent_round()  # claims it: no new container

    seat = Session.objects.get(pk=seat.pk)
    assert seat.state == SessionState.RUNNING
    assert seat.desktop_port == claimed.port and seat.container_id == claimed.container_id
    assert login(seat.desktop_port, seat.vnc_password) == "OK"
    assert login(seat.desktop_port, "wrongpw1").startswith("FAILED")
    assert len(containers()) == 2  # the claimed one and the other seat's warm one

    # Cancelled: the unclaimed warm desktop is stopped; the student's desktop runs on.
    do_cancel_booking(teacher, booking)
    do_scheduling_cycle()
    agent_round()
    assert list(containers()) == [claimed.container_id]
    assert Session.objects.get(pk=seat.pk).state == SessionState.RUNNING
    assert not WarmDesktop.objects.exists()
