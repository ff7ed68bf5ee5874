"""A failed start is reported with a failure code next to the runtime's own words.

Issue 25, item 8b: the portal words the code in the reader's language; the raw text is for
the admins. The Docker test makes the engine refuse a desktop for more CPUs than the host has.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nodeagent import failures
from nodeagent.reconcile import Reconciler
from nodeagent.runtime import StartFailed
from nodeagent.runtime.docker_runtime import DockerRuntime
from nodeagent.runtime.simulated_runtime import SimulatedRuntime
from tests.nodeagent.test_reconcile import converge


@pytest.mark.parametrize(
    ("text", "code"),
    [
        (
            "the Docker engine refused the desktop: Range of CPUs is from 0.01 to 2.00, as "
            "there are only 2 CPUs available",
            failures.NOT_ENOUGH_CPUS,
        ),
        ("the Docker engine refused the desktop: Minimum memory limit allowed is 6MB",
         failures.NOT_ENOUGH_MEMORY),
        ("image deskpool/x:1 is not present on node gpu-a", failures.IMAGE_MISSING),
        ("the Docker engine refused the desktop: could not select device driver \"\" with "
         "capabilities: [[gpu]]", failures.DEVICE_MISSING),
        ("no VNC handshake on 127.0.0.1:32768 within 60 s (OSError: refused)", failures.TIMEOUT),
        ("desktop ran out of memory: the kernel's OOM killer ended it", failures.OUT_OF_MEMORY),
        ("something else entirely", failures.OTHER),
    ],
)  # fmt: skip
def test_known_runtime_failures_get_their_code(text: str, code: str) -> None:
    assert StartFailed(text).code == code
    assert StartFailed(text, code=failures.TIMEOUT).code == failures.TIMEOUT  # given: kept


def test_a_failed_start_is_reported_with_its_code_and_words(fake_portal, make_session) -> None:  # type: ignore[no-untyped-def]
    runtime = SimulatedRuntime(node_name="n", known_images={"deskpool/tiny:latest"})
    reconciler = Reconciler(runtime, fake_portal)

    converge(reconciler, [make_session(6, image="nope:latest")], steps=3)

    assert fake_portal.states(6) == ["STARTING", "FAILED"]
    failed = fake_portal.last(6)
    assert failed["failure"] == failures.IMAGE_MISSING
    assert "nope:latest is not present" in failed["reason"]


@pytest.mark.docker
def test_docker_refusing_more_cpus_than_the_host_has_is_not_enough_cpus(
    docker_client, tiny_image, node_name, sessions_dir, make_session
) -> None:  # type: ignore[no-untyped-def]
    runtime = DockerRuntime(
        docker_client, node_name=node_name, sessions_dir=sessions_dir, ready_timeout_s=30
    )
    too_many = float((os.cpu_count() or 1) + 2)
    session = make_session(4190, image=tiny_image, cpus=too_many)

    with pytest.raises(StartFailed) as failed:
        runtime.start(session)

    assert failed.value.code == failures.NOT_ENOUGH_CPUS, str(failed.value)
    assert "CPU" in str(failed.value)
    assert runtime.list_managed() == []
    assert not (Path(sessions_dir) / "s4190").exists()
