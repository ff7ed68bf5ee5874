"""Each running session's own GPU and CPU use, for the portal's idle detection (issue 15).

The agent sends it with every heartbeat (:class:`~nodeagent.protocol.SessionUsage`,
docs/agent-protocol.md). For Docker desktops (:class:`DockerUsage`):

- **CPU:** one non-streaming, one-shot stats call per running container
  (``GET /containers/<id>/stats?stream=false&one-shot=true``, which answers at once instead
  of sampling for a second). The figure is the container's CPU time between this reading and
  the previous one, over the node's CPU time in the same span, in percent of the container's
  CPU limit (``NanoCpus``; without one, of all the node's CPUs). A container's first reading
  has nothing to compare with: None.
- **GPU** (:class:`NvmlUsage`), only where NVML loads and the container has GPU devices:
  a MIG instance's utilisation where NVML reports it for the MIG device (most drivers do
  not: then None; DCGM's profiling counters would have it); a whole or shared GPU: the sum
  of NVML's per-process SM utilisation samples (``nvmlDeviceGetProcessUtilization``) of the
  container's processes (host PIDs from ``docker top``), capped at 100. This path cannot
  run without a GPU; it reports None wherever NVML has no answer.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import docker
import pynvml
from docker.errors import DockerException

from nodeagent.protocol import SessionUsage
from nodeagent.runtime.base import ManagedContainer

logger = logging.getLogger(__name__)

MIG_PREFIX = "MIG-"


@dataclass(frozen=True)
class CpuReading:
    """The cumulative counters of one stats answer, in nanoseconds."""

    container_ns: int
    system_ns: int
    online_cpus: int


def cpu_reading(stats: dict[str, Any]) -> CpuReading | None:
    """The counters of a Docker stats answer; None when it has none (a stopped container)."""
    cpu = stats.get("cpu_stats") or {}
    total = (cpu.get("cpu_usage") or {}).get("total_usage")
    system = cpu.get("system_cpu_usage")
    if not isinstance(total, int) or not isinstance(system, int) or system <= 0:
        return None
    online = cpu.get("online_cpus") or len((cpu.get("cpu_usage") or {}).get("percpu_usage") or [])
    return CpuReading(total, system, int(online) or 1)


def cpu_percent(
    previous: CpuReading | None, current: CpuReading, limit_cpus: float | None
) -> float | None:
    """Percent of the container's CPU limit used between two readings (0-100)."""
    if previous is None:
        return None
    system = current.system_ns - previous.system_ns
    used = current.container_ns - previous.container_ns
    if system <= 0 or used < 0:
        return None
    cpus_used = used / system * current.online_cpus  # in CPUs, as `docker stats` counts
    allowed = limit_cpus if limit_cpus else current.online_cpus
    return round(min(100.0, max(0.0, cpus_used / allowed * 100)), 2)


def cpu_limit(attrs: dict[str, Any]) -> float | None:
    """The container's CPU limit in CPUs (``--cpus``), None without one."""
    nano = (attrs.get("HostConfig") or {}).get("NanoCpus") or 0
    return nano / 1_000_000_000 if nano > 0 else None


def gpu_devices(attrs: dict[str, Any]) -> tuple[str, ...]:
    """The GPU or MIG UUIDs the container sees (NVIDIA_VISIBLE_DEVICES), () for none."""
    for item in (attrs.get("Config") or {}).get("Env") or []:
        name, _, value = item.partition("=")
        if name == "NVIDIA_VISIBLE_DEVICES" and value not in ("", "void", "none"):
            return tuple(device for device in value.split(",") if device)
    return ()


class NvmlUsage:
    """The GPU part: per MIG instance, or per process of a container (module docstring)."""

    def __init__(self) -> None:
        self.available = False
        self._last_seen: dict[str, int] = {}  # GPU UUID -> newest sample's timestamp
        try:
            pynvml.nvmlInit()
            self.available = True
        except pynvml.NVMLError as error:
            logger.info("no NVML (%s): sessions' GPU use is not reported", error)

    def percent(self, devices: Sequence[str], pids: set[int]) -> float | None:
        if not self.available or not devices:
            return None
        total, known = 0.0, False
        for uuid in devices:
            value = self._mig(uuid) if uuid.startswith(MIG_PREFIX) else self._processes(uuid, pids)
            if value is not None:
                total, known = total + value, True
        return round(min(100.0, total), 2) if known else None

    def _mig(self, uuid: str) -> float | None:
        try:
            handle = pynvml.nvmlDeviceGetHandleByUUID(uuid)
            return float(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu)
        except pynvml.NVMLError:  # NotSupported on MIG devices with most drivers
            return None

    def _processes(self, uuid: str, pids: set[int]) -> float | None:
        try:
            handle = pynvml.nvmlDeviceGetHandleByUUID(uuid)
            samples = pynvml.nvmlDeviceGetProcessUtilization(handle, self._last_seen.get(uuid, 0))
        except pynvml.NVMLError_NotFound:  # no process sampled since the last call
            return 0.0
        except pynvml.NVMLError:
            return None
        if samples:
            self._last_seen[uuid] = max(sample.timeStamp for sample in samples)
        return float(sum(sample.smUtil for sample in samples if sample.pid in pids))


class DockerUsage:
    """Reads the usage of a Docker runtime's running desktops (module docstring)."""

    def __init__(self, client: docker.DockerClient, gpu: NvmlUsage | None = None) -> None:
        self.client = client
        self.gpu = gpu
        self._previous: dict[str, CpuReading] = {}

    def read(self, containers: Sequence[ManagedContainer]) -> list[SessionUsage]:
        found, seen = [], set()
        for container in containers:
            if not container.running or not container.container_id:
                continue
            seen.add(container.container_id)
            found.append(
                SessionUsage(
                    session_id=container.session_id,
                    cpu_pct=self._cpu(container),
                    gpu_pct=self._gpu(container),
                )
            )
        for gone in set(self._previous) - seen:
            del self._previous[gone]
        return found

    def _cpu(self, container: ManagedContainer) -> float | None:
        try:
            stats = self.client.api.stats(container.container_id, stream=False, one_shot=True)
        except DockerException as error:
            logger.debug("no stats for %s: %s", container.container_id, error)
            return None
        current = cpu_reading(stats)
        if current is None:
            return None
        previous = self._previous.get(container.container_id)
        self._previous[container.container_id] = current
        return cpu_percent(previous, current, container.cpu_limit)

    def _gpu(self, container: ManagedContainer) -> float | None:
        if self.gpu is None or not self.gpu.available or not container.gpu_devices:
            return None
        try:
            top = self.client.api.top(container.container_id, ps_args="-o pid")
        except DockerException:
            return None
        pids = {int(row[0]) for row in top.get("Processes") or [] if row and row[0].isdigit()}
        return self.gpu.percent(container.gpu_devices, pids)
