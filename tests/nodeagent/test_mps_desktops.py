"""A share's desktop is a capped MPS client, or it does not start (the Docker create kwargs).

The engine here has no NVIDIA runtime, so the node is made to believe it has one
(``gpu_enabled``) and the create arguments are inspected rather than run.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from nodeagent.config import GpuShares
from nodeagent.mps import CLIENT_PIPE_DIRECTORY, MpsSupervisor
from nodeagent.protocol import DESKTOP_PASSWORD_MOUNT, LABEL_NODE
from nodeagent.runtime import StartFailed
from nodeagent.runtime.docker_desktops import DesktopContainers
from nodeagent.runtime.docker_runtime import DockerRuntime, _Attempt
from tests.nodeagent.conftest import desired_session, desired_warm
from tests.nodeagent.test_mps import PROGRAM, FakeMps

pytestmark = pytest.mark.docker

GPU = "GPU-11111111-2222-3333-4444-555555555555"
OTHER = "GPU-99999999-2222-3333-4444-555555555555"


@pytest.fixture
def fake_mps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeMps]:
    fake = FakeMps(tmp_path, monkeypatch)
    yield fake
    fake.kill_all()


def _desktops(docker_client, node_name: str, sessions_dir: Path, mps: MpsSupervisor):  # type: ignore[no-untyped-def]
    desktops = DesktopContainers(
        docker_client, node_name=node_name, sessions_dir=sessions_dir, mps=mps
    )
    desktops.gpu_enabled = True  # as on a node with the NVIDIA container runtime
    return desktops


def test_a_share_desktop_gets_its_gpu_the_pipe_folder_and_the_caps(
    docker_client, node_name, sessions_dir, fake_mps
) -> None:  # type: ignore[no-untyped-def]
    mps = MpsSupervisor(fake_mps.root, PROGRAM, private_shm=False)
    mps.ensure({GPU: GpuShares(count=4, memory_mb=10240)})
    mps.offer([GPU])
    desktops = _desktops(docker_client, node_name, sessions_dir, mps)

    args = desktops.limits_args(desired_session(1, gpu_devices=[GPU]), "session 1")

    assert args["runtime"] == "nvidia"
    env = args["environment"]
    assert env["NVIDIA_VISIBLE_DEVICES"] == GPU
    assert env["CUDA_MPS_PIPE_DIRECTORY"] == CLIENT_PIPE_DIRECTORY
    assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=10240M"
    assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "25"
    # Its GPU's pipe folder only, read-only: it cannot plant files there for the others.
    assert args["volumes"] == {
        str(fake_mps.root / GPU / "pipe"): {"bind": CLIENT_PIPE_DIRECTORY, "mode": "ro"},
        str(fake_mps.root / GPU / "shm"): {"bind": "/dev/shm", "mode": "rw"},
    }
    assert "shm_size" not in args  # the GPU's shm (its tmpfs) is the desktop's /dev/shm
    # A whole GPU (and a MIG instance) on the same node: no MPS at all.
    whole = desktops.limits_args(desired_session(2, gpu_devices=[OTHER]), "session 2")
    assert whole["volumes"] == {} and whole["shm_size"] == "64m"
    assert not any(key.startswith("CUDA_MPS") for key in whole["environment"])


def test_the_session_and_warm_mounts_keep_the_pipe_folder(
    docker_client, node_name, sessions_dir, fake_mps, tiny_image
) -> None:  # type: ignore[no-untyped-def]
    mps = MpsSupervisor(fake_mps.root, PROGRAM, private_shm=False)
    mps.ensure({GPU: GpuShares(count=2, memory_mb=100)})
    mps.offer([GPU])
    runtime = DockerRuntime(docker_client, node_name=node_name, sessions_dir=sessions_dir, mps=mps)
    runtime._desktops.gpu_enabled = True
    session = desired_session(3, gpu_devices=[GPU], image=tiny_image)
    volumes = runtime._create_args(session, _Attempt(sessions_dir / "s3"))["volumes"]

    assert volumes[str(fake_mps.root / GPU / "pipe")]["bind"] == CLIENT_PIPE_DIRECTORY
    assert volumes[str(sessions_dir / "s3")]["bind"] == DESKTOP_PASSWORD_MOUNT


def test_a_share_without_a_healthy_daemon_does_not_start(
    docker_client, node_name, sessions_dir, fake_mps, tiny_image, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("FAKE_MPS_FAIL", "1")
    mps = MpsSupervisor(fake_mps.root, PROGRAM, private_shm=False)
    mps.ensure({GPU: GpuShares(count=4, memory_mb=10240)})
    mps.offer([GPU])  # as if offered at the inventory; its daemon cannot start
    runtime = DockerRuntime(docker_client, node_name=node_name, sessions_dir=sessions_dir, mps=mps)
    runtime._desktops.gpu_enabled = True

    with pytest.raises(StartFailed, match="no desktop gets an uncapped share"):
        runtime.start(desired_session(4, gpu_devices=[GPU], image=tiny_image))
    with pytest.raises(StartFailed, match="MPS control daemon is not healthy"):
        runtime._warm.start(desired_warm("k1", gpu_devices=[GPU], image=tiny_image))

    assert runtime.list_managed() == []
    mine = docker_client.containers.list(all=True, filters={"label": f"{LABEL_NODE}={node_name}"})
    assert mine == []
