"""Each session's own GPU and CPU use in the agent's heartbeat (issue 15, idle detection):
the simulated runtime's figures (SIMULATED, settable in code and through its usage file),
the heartbeat carrying them, the CPU arithmetic, and the Docker runtime reading a real tiny
desktop's CPU from the engine's stats (busy and idle)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from types import SimpleNamespace

import pynvml
import pytest

from nodeagent.protocol import Heartbeat, to_wire
from nodeagent.runtime.docker_runtime import DockerRuntime
from nodeagent.runtime.simulated_runtime import SIMULATED_USAGE, SimulatedRuntime, usage_file
from nodeagent.runtime.usage import CpuReading, NvmlUsage, cpu_limit, cpu_percent, gpu_devices

from .conftest import desired_session
from .test_agent_loop import TinyPortal, make_agent

pytestmark = pytest.mark.lifecycle

READING_WAIT_S = 60  # the most a Docker reading is waited for


def figures(runtime) -> dict[int, tuple[float | None, float | None]]:  # type: ignore[no-untyped-def]
    return {u.session_id: (u.gpu_pct, u.cpu_pct) for u in runtime.usage(runtime.list_managed())}


def test_simulated_figures_default_to_idle_and_can_be_set(tmp_path: Path) -> None:
    runtime = SimulatedRuntime(
        node_name="gpu-a01", state_file=tmp_path / "simulated-gpu-a01.json", start_delay_s=0
    )
    for session_id in (1, 2, 3):
        runtime.start(desired_session(session_id))
    assert figures(runtime) == {1: SIMULATED_USAGE, 2: SIMULATED_USAGE, 3: SIMULATED_USAGE}

    runtime.set_usage(1, 93.0, 40.0)
    # From outside the agent (a test or a demo): the usage file, read at every heartbeat.
    path = usage_file(tmp_path, "gpu-a01")
    rows = json.loads(path.read_text())
    rows.update({"2": [250, None], "3": ["busy", 1], "x": [1, 1]})
    path.write_text(json.dumps(rows))
    assert figures(runtime) == {1: (93.0, 40.0), 2: (100.0, None), 3: SIMULATED_USAGE}

    runtime.simulate_exit(3, 1)
    assert set(figures(runtime)) == {1, 2}  # running desktops only


def test_the_heartbeat_carries_each_running_sessions_usage(tmp_path: Path) -> None:
    agent = make_agent(TinyPortal(), tmp_path)
    quiet = to_wire(agent.heartbeat_message())
    assert "usage" not in quiet  # no desktops: what an older agent sends
    agent.runtime.start(desired_session(7))
    agent.runtime.set_usage(7, 61.5, None)  # type: ignore[attr-defined]
    message = agent.heartbeat_message()
    assert message.running_sessions == [7]
    assert to_wire(message)["usage"] == [{"session_id": 7, "gpu_pct": 61.5, "cpu_pct": None}]
    assert Heartbeat.model_validate(to_wire(message)) == message


def test_cpu_percent_between_two_readings() -> None:
    first = CpuReading(container_ns=1_000, system_ns=10_000, online_cpus=4)
    # 1 s of one CPU over 1 s of 4 CPUs (4 s of system time): one CPU busy.
    second = CpuReading(container_ns=1_000 + 10**9, system_ns=10_000 + 4 * 10**9, online_cpus=4)
    assert cpu_percent(None, second, 2.0) is None  # a first reading: nothing to compare
    assert cpu_percent(first, second, 2.0) == 50.0  # half of a 2-CPU limit
    assert cpu_percent(first, second, 0.5) == 100.0  # capped
    assert cpu_percent(first, second, None) == 25.0  # no limit: of the node's 4 CPUs
    assert cpu_percent(second, first, 2.0) is None  # counters went back (a restart)
    attrs = {
        "HostConfig": {"NanoCpus": 1_500_000_000},
        "Config": {"Env": ["PATH=/bin", "NVIDIA_VISIBLE_DEVICES=MIG-a,MIG-b"]},
    }
    assert (cpu_limit(attrs), gpu_devices(attrs)) == (1.5, ("MIG-a", "MIG-b"))
    void = {"HostConfig": {"NanoCpus": 0}, "Config": {"Env": ["NVIDIA_VISIBLE_DEVICES=void"]}}
    assert (cpu_limit(void), gpu_devices(void)) == (None, ())


def cpu_until(runtime: DockerRuntime, wanted, what: str) -> float:  # type: ignore[no-untyped-def]
    """Read the desktop's CPU each second until ``wanted(value)``; fail after a minute."""
    deadline = time.monotonic() + READING_WAIT_S
    value = None
    while time.monotonic() < deadline:
        (usage,) = runtime.usage(runtime.list_managed())
        value = usage.cpu_pct
        if value is not None and wanted(value):
            assert usage.gpu_pct is None  # no NVML here
            return value
        time.sleep(1)
    raise AssertionError(f"the desktop's CPU was never {what}: last {value}")


@pytest.mark.docker
def test_docker_reads_a_real_desktops_cpu_busy_and_idle(
    docker_client,  # type: ignore[no-untyped-def]
    tiny_image: str,
    node_name: str,
    sessions_dir: Path,
) -> None:
    runtime = DockerRuntime(
        docker_client, node_name=node_name, sessions_dir=sessions_dir, ready_timeout_s=30
    )
    started = runtime.start(desired_session(41, cpus=0.5))
    (managed,) = runtime.list_managed()
    assert managed.cpu_limit == 0.5 and managed.gpu_devices == ()  # no NVIDIA runtime here
    (first,) = runtime.usage([managed])
    assert (first.session_id, first.cpu_pct) == (41, None)  # nothing to compare with yet

    cpu_until(runtime, lambda pct: pct < 30, "idle")
    container = docker_client.containers.get(started.container_id)
    container.exec_run(["sh", "-c", "while :; do :; done"], detach=True)
    # A busy loop under a 0.5-CPU limit: about all of its limit.
    assert cpu_until(runtime, lambda pct: pct > 70, "busy") <= 100


class FakeNvml:
    """NVML as a GPU node's driver answers (no GPU here): per-process samples on a whole GPU,
    utilisation not supported on one MIG instance and reported on another."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.asked_since: list[int] = []
        monkeypatch.setattr(pynvml, "nvmlInit", lambda: None)
        monkeypatch.setattr(pynvml, "nvmlDeviceGetHandleByUUID", lambda uuid: uuid)
        monkeypatch.setattr(pynvml, "nvmlDeviceGetProcessUtilization", self.processes)
        monkeypatch.setattr(pynvml, "nvmlDeviceGetUtilizationRates", self.rates)

    def processes(self, handle: str, since: int) -> list[SimpleNamespace]:
        self.asked_since.append(since)
        if handle == "GPU-quiet":
            raise pynvml.NVMLError_NotFound()  # no process sampled since then
        return [
            SimpleNamespace(pid=100, timeStamp=5_000, smUtil=30),
            SimpleNamespace(pid=101, timeStamp=6_000, smUtil=45),
            SimpleNamespace(pid=999, timeStamp=7_000, smUtil=90),  # another container's
        ]

    def rates(self, handle: str) -> SimpleNamespace:
        if handle == "MIG-reported":
            return SimpleNamespace(gpu=12)
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)


def test_the_gpu_figure_from_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    nvml = FakeNvml(monkeypatch)
    gpu = NvmlUsage()
    assert gpu.available
    pids = {1, 100, 101}
    assert gpu.percent(["GPU-whole"], pids) == 75.0  # the container's two processes only
    assert gpu.percent(["GPU-whole"], pids) == 75.0
    assert nvml.asked_since == [0, 7_000]  # each call asks for what came since the last
    assert gpu.percent(["GPU-quiet"], pids) == 0.0
    assert gpu.percent(["GPU-whole", "GPU-whole"], pids) == 100.0  # capped
    assert gpu.percent(["MIG-unsupported"], pids) is None  # most drivers: no figure
    assert gpu.percent(["MIG-reported"], pids) == 12.0
    assert gpu.percent([], pids) is None
