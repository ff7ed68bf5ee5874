"""A GPU desktop can compute on its GPU (issue 37 item 5): the NVIDIA container runtime is
asked for the driver's compute (CUDA), utility (nvidia-smi, NVML) and graphics libraries;
a desktop without a GPU sees none. Each studio Dockerfile labels the PyTorch it holds as
nodeagent.software's catalogue says."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from nodeagent.runtime.docker_desktops import DesktopContainers
from nodeagent.software import IMAGE_TORCH, TORCH_LABEL
from tests.nodeagent.conftest import desired_session

IMAGES = Path(__file__).resolve().parents[2] / "nodeagent" / "images"
GPU = "GPU-11111111-2222-3333-4444-555555555555"
DOCKERFILES = {
    "deskpool/studio:latest": "Dockerfile.studio",
    "deskpool/studio-cuda:latest": "Dockerfile.studio-cuda",
}


def test_each_studio_dockerfile_labels_the_pytorch_the_catalogue_names() -> None:
    assert set(DOCKERFILES) == set(IMAGE_TORCH)
    for image, dockerfile in DOCKERFILES.items():
        text = (IMAGES / dockerfile).read_text()
        labels = re.findall(rf"^LABEL {re.escape(TORCH_LABEL)}=(\w+)$", text, re.M)
        assert labels == [IMAGE_TORCH[image]], dockerfile


@pytest.mark.docker
def test_a_gpu_desktop_gets_the_drivers_compute_utility_and_graphics_capabilities(
    docker_client, node_name, sessions_dir
) -> None:  # type: ignore[no-untyped-def]
    desktops = DesktopContainers(docker_client, node_name=node_name, sessions_dir=sessions_dir)
    desktops.gpu_enabled = True  # as on a node with the NVIDIA container runtime

    args = desktops.limits_args(desired_session(1, gpu_devices=[GPU]), "session 1")

    assert args["runtime"] == "nvidia"
    env = args["environment"]
    assert env["NVIDIA_VISIBLE_DEVICES"] == GPU
    assert set(env["NVIDIA_DRIVER_CAPABILITIES"].split(",")) == {"compute", "utility", "graphics"}

    cpu_only = desktops.limits_args(desired_session(2, gpu_devices=[]), "session 2")
    assert "runtime" not in cpu_only
    assert cpu_only["environment"]["NVIDIA_VISIBLE_DEVICES"] == "void"
    assert "NVIDIA_DRIVER_CAPABILITIES" not in cpu_only["environment"]


@pytest.mark.docker
def test_without_the_nvidia_runtime_a_gpu_desktop_sees_no_gpu(
    docker_client, node_name, sessions_dir
) -> None:  # type: ignore[no-untyped-def]
    desktops = DesktopContainers(docker_client, node_name=node_name, sessions_dir=sessions_dir)
    desktops.gpu_enabled = False
    env = desktops.limits_args(desired_session(3, gpu_devices=[GPU]), "session 3")["environment"]
    assert env["NVIDIA_VISIBLE_DEVICES"] == "void"
    assert env["DESKPOOL_SIMULATED_GPU_DEVICES"] == GPU
    assert "NVIDIA_DRIVER_CAPABILITIES" not in env
