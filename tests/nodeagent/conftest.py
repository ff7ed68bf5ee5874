"""Fixtures for the node agent tests: a real Docker engine, the tiny image, and cleanup."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nodeagent.protocol import (
    LABEL_MANAGED,
    LABEL_NODE,
    DesiredSession,
    DesiredWarm,
    SessionReport,
    WarmReport,
    to_wire,
)
from nodeagent.runtime import course_mounts, home_mounts
from nodeagent.runtime.desktop_network import remove_networks

TINY_IMAGE = "deskpool/tiny:latest"
# The image is built by nodeagent/images/build.sh; wait for a build in progress this long.
IMAGE_WAIT_S = float(os.environ.get("DESKPOOL_TEST_IMAGE_WAIT_S", "1500"))


@pytest.fixture(scope="session")
def docker_client():  # type: ignore[no-untyped-def]
    """A client for the local engine; skips the test when none answers."""
    docker = pytest.importorskip("docker")
    try:
        client = docker.from_env(timeout=30)
        client.ping()
    except docker.errors.DockerException as error:
        pytest.skip(f"no Docker engine answers here: {error}")
    return client


def wait_for_image(docker_client, image: str, target: str) -> str:  # type: ignore[no-untyped-def]
    """``image`` once it exists: waits for a build in progress (IMAGE_WAIT_S), then skips
    the test with what to run (``build.sh <target>``)."""
    from docker.errors import ImageNotFound

    deadline = time.monotonic() + IMAGE_WAIT_S
    while True:
        try:
            docker_client.images.get(image)
            return image
        except ImageNotFound:
            if time.monotonic() > deadline:
                pytest.skip(
                    f"{image} not built after {IMAGE_WAIT_S:.0f} s: "
                    f"run nodeagent/images/build.sh {target}"
                )
            time.sleep(10)


@pytest.fixture(scope="session")
def tiny_image(docker_client) -> str:  # type: ignore[no-untyped-def]
    """The tiny desktop image; waits for a build in progress, then skips with a reason."""
    return wait_for_image(docker_client, TINY_IMAGE, "tiny")


def remove_node_objects(docker_client, name: str) -> None:  # type: ignore[no-untyped-def]
    """Remove every container and volume the agent made for node ``name``."""
    labels = [f"{LABEL_MANAGED}=true", f"{LABEL_NODE}={name}"]
    for container in docker_client.containers.list(all=True, filters={"label": labels}):
        container.remove(force=True)
    for volume in docker_client.volumes.list(filters={"label": labels}):
        volume.remove(force=True)


@pytest.fixture
def node_name(docker_client) -> Iterator[str]:  # type: ignore[no-untyped-def]
    """A node name unique to the test; every container and volume labelled with it is removed."""
    name = f"test-{uuid.uuid4().hex[:10]}"
    yield name
    remove_node_objects(docker_client, name)
    # The node's sealed desktop network, and those of nodes named after it ("<name>-b").
    for network in docker_client.networks.list(filters={"label": f"{LABEL_MANAGED}=true"}):
        if network.attrs.get("Labels", {}).get(LABEL_NODE, "").startswith(name):
            remove_networks(docker_client, network.attrs["Labels"][LABEL_NODE])


@pytest.fixture
def sessions_dir(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "state" / "sessions"
    yield path
    # A test that failed half way may leave a warm desktop's home mounted: unmount it, so
    # nothing later deletes through the mount.
    homes = path / "warm-homes"
    if homes.is_dir():
        for home in homes.iterdir():
            home_mounts.release(home)
    # And its /courses folder (runtime.course_mounts), with the course folders bound in it.
    courses = path / "warm-courses"
    if courses.is_dir():
        for folder in courses.iterdir():
            if folder.is_dir():
                course_mounts.release_warm(path, folder.name)


def desired_session(
    session_id: int, *, image: str = TINY_IMAGE, **overrides: object
) -> DesiredSession:
    """A desired session as the portal would send it, with test-friendly limits."""
    session = DesiredSession(
        session_id=session_id,
        user="alice",
        course="cs101",
        image=image,
        cpus=0.5,
        memory_mb=256,
        pids_limit=256,
        shm_mb=64,
        gpu_devices=["MIG-00000000-0000-0000-0000-000000000001"],
        vnc_password="s3cretpw",
        home_volume=f"deskpool-test-home-{uuid.uuid4().hex[:8]}",
    )
    # model_copy does not validate: a test may make what the portal never sends (an empty
    # password makes the tiny image exit at once).
    return session.model_copy(update=overrides) if overrides else session


def desired_warm(key: str, *, image: str = TINY_IMAGE, **overrides: object) -> DesiredWarm:
    """A warm desktop as the portal would list it, with test-friendly limits."""
    warm = DesiredWarm(
        key=key,
        booking=7,
        course="cs101",
        image=image,
        cpus=0.5,
        memory_mb=256,
        pids_limit=256,
        shm_mb=64,
        gpu_devices=["MIG-00000000-0000-0000-0000-000000000009"],
    )
    return warm.model_copy(update=overrides) if overrides else warm


@pytest.fixture
def make_session():  # type: ignore[no-untyped-def]
    return desired_session


class FakePortal:
    """The portal's report endpoint, in process: records reports, can answer 409 or be down."""

    def __init__(self) -> None:
        import threading

        # What the portal would receive: each report as it goes on the wire.
        self.reports: list[tuple[int, dict[str, Any]]] = []
        self.warm_reports: list[tuple[str, dict[str, Any]]] = []
        self.unwanted_warm: set[str] = set()  # warm keys answered with 409
        self.unwanted: set[int] = set()  # sessions answered with 409
        self.refuse_placements: set[str] = set()  # reports about these placements get 409
        self.down = False
        self.answering = threading.Event()  # cleared: a busy portal, reports wait for it
        self.answering.set()
        self._lock = threading.Lock()

    def report(self, session_id: int, report: SessionReport) -> str:
        from nodeagent.portal_client import Conflict, PortalUnavailable

        self.answering.wait(30)
        if self.down:
            raise PortalUnavailable("fake portal is down")
        with self._lock:
            if session_id in self.unwanted:
                raise Conflict("session no longer wanted", state="ENDED")
            if report.placement in self.refuse_placements:
                raise Conflict("session was placed again", state="PLACED")
            self.reports.append((session_id, to_wire(report)))
        return report.state

    def report_warm(self, key: str, report: WarmReport) -> str:
        from nodeagent.portal_client import Conflict, PortalUnavailable

        if self.down:
            raise PortalUnavailable("fake portal is down")
        with self._lock:
            if key in self.unwanted_warm:
                raise Conflict("warm desktop no longer wanted", state="GONE")
            self.warm_reports.append((key, to_wire(report)))
        return report.state

    def warm_states(self, key: str) -> list[str]:
        with self._lock:
            return [r["state"] for k, r in self.warm_reports if k == key]

    def states(self, session_id: int) -> list[str]:
        with self._lock:
            return [r["state"] for sid, r in self.reports if sid == session_id]

    def last(self, session_id: int) -> dict[str, Any]:
        with self._lock:
            return [r for sid, r in self.reports if sid == session_id][-1]


@pytest.fixture
def fake_portal() -> FakePortal:
    return FakePortal()
