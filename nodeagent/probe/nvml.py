"""The real GPU probe, through NVML (``pynvml`` from nvidia-ml-py).

Every field is read on its own: a field the driver or card does not support
(``NVMLError_NotSupported``, or any other NVML error) becomes ``None`` or is left
out, and the probe carries on with the next field and the next device.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import pynvml

from nodeagent.probe import NodeFacts, host_facts
from nodeagent.protocol import GpuInventory, GpuMetrics, MigInstance

logger = logging.getLogger(__name__)

T = TypeVar("T")
_MIB = 1024 * 1024


class NvmlUnavailable(RuntimeError):
    """NVML (the NVIDIA driver library) is not present or does not start on this machine."""


def read_field(read: Callable[..., T], *args: Any) -> T | None:
    """Run one NVML read; an NVML error means "not available" for that field only."""
    try:
        return read(*args)
    except pynvml.NVMLError as error:
        if not isinstance(error, pynvml.NVMLError_NotSupported):
            logger.debug("NVML %s failed: %s", getattr(read, "__name__", read), error)
        return None


def _read_text(read: Callable[..., str | bytes], *args: Any) -> str | None:
    value = read_field(read, *args)
    return None if value is None else _text(value)


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


@dataclass
class _Device:
    index: int
    handle: Any
    uuid: str
    pci_bus_id: str


class NvmlProbe:
    """Inventory and metrics of the GPUs the local NVIDIA driver sees."""

    simulated = False

    def __init__(self, facts: NodeFacts | None = None) -> None:
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as error:
            raise NvmlUnavailable(f"NVML is not available on this machine: {error}") from error
        self._facts = facts or host_facts()
        self._devices = self._enumerate()

    def close(self) -> None:
        read_field(pynvml.nvmlShutdown)

    def node_facts(self) -> NodeFacts:
        return self._facts

    def _enumerate(self) -> list[_Device]:
        devices: list[_Device] = []
        for index in range(read_field(pynvml.nvmlDeviceGetCount) or 0):
            handle = read_field(pynvml.nvmlDeviceGetHandleByIndex, index)
            if handle is None:
                continue
            uuid = _read_text(pynvml.nvmlDeviceGetUUID, handle)
            pci = read_field(pynvml.nvmlDeviceGetPciInfo, handle)
            devices.append(
                _Device(
                    index=index,
                    handle=handle,
                    uuid=uuid or f"GPU-unknown-{index}",
                    pci_bus_id=_text(pci.busId) if pci is not None else "",
                )
            )
        return devices

    def inventory(self) -> list[GpuInventory]:
        by_bus_id = {_normal_bus_id(d.pci_bus_id): d.uuid for d in self._devices if d.pci_bus_id}
        return [self._inventory_of(device, by_bus_id) for device in self._devices]

    def _inventory_of(self, device: _Device, by_bus_id: dict[str, str]) -> GpuInventory:
        handle = device.handle
        name = _read_text(pynvml.nvmlDeviceGetName, handle)
        memory = read_field(pynvml.nvmlDeviceGetMemoryInfo, handle)
        capability = read_field(pynvml.nvmlDeviceGetCudaComputeCapability, handle)
        mig_modes = read_field(pynvml.nvmlDeviceGetMigMode, handle)
        mig_mode = bool(mig_modes and mig_modes[0] == pynvml.NVML_DEVICE_MIG_ENABLE)
        instances = _mig_instances(handle) if mig_mode else []
        return GpuInventory(
            uuid=device.uuid,
            index=device.index,
            name=name or "unknown",
            memory_mb=int(memory.total // _MIB) if memory is not None else 0,
            compute_capability=f"{capability[0]}.{capability[1]}" if capability else "",
            mig_mode=mig_mode,
            mig_instances=instances,
            nvlink_peers=_nvlink_peers(handle, by_bus_id, own_uuid=device.uuid),
            pci_bus_id=device.pci_bus_id,
            sharing="mig" if mig_mode else "whole",
            simulated=False,
        )

    def metrics(self, busy_devices: Sequence[str] = ()) -> list[GpuMetrics]:
        return [_metrics_of(device) for device in self._devices]


def _metrics_of(device: _Device) -> GpuMetrics:
    handle = device.handle
    utilization = read_field(pynvml.nvmlDeviceGetUtilizationRates, handle)
    memory = read_field(pynvml.nvmlDeviceGetMemoryInfo, handle)
    temperature = read_field(pynvml.nvmlDeviceGetTemperature, handle, pynvml.NVML_TEMPERATURE_GPU)
    power_mw = read_field(pynvml.nvmlDeviceGetPowerUsage, handle)
    return GpuMetrics(
        uuid=device.uuid,
        utilization_pct=float(utilization.gpu) if utilization is not None else None,
        memory_used_mb=int(memory.used // _MIB) if memory is not None else None,
        temperature_c=float(temperature) if temperature is not None else None,
        power_w=power_mw / 1000.0 if power_mw is not None else None,
    )


def _mig_instances(handle: Any) -> list[MigInstance]:
    instances: list[MigInstance] = []
    count = read_field(pynvml.nvmlDeviceGetMaxMigDeviceCount, handle) or 0
    for slot in range(count):
        mig = read_field(pynvml.nvmlDeviceGetMigDeviceHandleByIndex, handle, slot)
        if mig is None:  # empty slot: NVML answers NotFound
            continue
        uuid = _read_text(pynvml.nvmlDeviceGetUUID, mig)
        name = _read_text(pynvml.nvmlDeviceGetName, mig) or ""
        memory = read_field(pynvml.nvmlDeviceGetMemoryInfo, mig)
        if uuid is None:
            continue
        instances.append(
            MigInstance(
                uuid=uuid,
                profile=mig_profile_from_name(name),
                memory_mb=int(memory.total // _MIB) if memory is not None else 0,
            )
        )
    return instances


def mig_profile_from_name(name: str) -> str:
    """``"NVIDIA A100-SXM4-80GB MIG 1g.10gb"`` → ``"1g.10gb"`` (NVML names MIG devices this way)."""
    _, sep, profile = name.rpartition("MIG ")
    return profile.strip() if sep else "unknown"


def _nvlink_peers(handle: Any, by_bus_id: dict[str, str], own_uuid: str) -> list[str]:
    peers: list[str] = []
    for link in range(pynvml.NVML_NVLINK_MAX_LINKS):
        state = read_field(pynvml.nvmlDeviceGetNvLinkState, handle, link)
        if state is None:
            # Unsupported or past the last link: no more links to look at on most cards.
            if link == 0:
                break
            continue
        if state != pynvml.NVML_FEATURE_ENABLED:
            continue
        remote = read_field(pynvml.nvmlDeviceGetNvLinkRemotePciInfo, handle, link)
        if remote is None:
            continue
        peer = by_bus_id.get(_normal_bus_id(_text(remote.busId)))
        if peer and peer != own_uuid and peer not in peers:
            peers.append(peer)
    return peers


def _normal_bus_id(bus_id: str) -> str:
    # NVML mixes 8- and 4-digit PCI domains ("00000000:07:00.0" vs "0000:07:00.0").
    domain, _, rest = bus_id.lower().partition(":")
    try:
        return f"{int(domain or '0', 16):x}:{rest}"
    except ValueError:
        return bus_id.lower()
