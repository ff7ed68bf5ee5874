"""The real GPU probe, through NVML (``pynvml`` from nvidia-ml-py).

Every field is read on its own: a field the driver or card does not support
(``NVMLError_NotSupported``, or any other NVML error) becomes ``None`` or is left
out, and the probe carries on with the next field and the next device.

XID errors come from an NVML event set, registered once at start for the GPUs that
support XID events and drained without waiting (timeout 0) at every metrics read: each
GPU's ``xid_errors`` lists the codes seen since the previous read, ``None`` on a GPU
that is not watched.
"""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import pynvml

from nodeagent.probe.base import NodeFacts, host_facts
from nodeagent.probe.dcgm import DcgmActivity, InstanceActivity
from nodeagent.probe.gpu_health import read_health
from nodeagent.protocol import (
    XID_ERRORS_MAX,
    GpuInventory,
    GpuMetrics,
    MigInstance,
    SliceMetrics,
)
from nodeagent.wire_types import PCIE_TOPOLOGY_LEVELS

logger = logging.getLogger(__name__)

T = TypeVar("T")
_MIB = 1024 * 1024
# Events read from the XID event set per metrics call at most; the rest wait for the next.
_XID_EVENTS_PER_READ = 256
_LINK_MAX = 64  # PCIe generations and lane counts are far below this


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


def succeeds(call: Callable[..., object], *args: Any) -> bool:
    """Run one NVML call whose answer is nothing; False (and logged) when NVML refuses it."""
    try:
        call(*args)
    except pynvml.NVMLError as error:
        logger.debug("NVML %s failed: %s", getattr(call, "__name__", call), error)
        return False
    return True


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

    def __init__(self, facts: NodeFacts | None = None, dcgm: DcgmActivity | None = None) -> None:
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as error:
            raise NvmlUnavailable(f"NVML is not available on this machine: {error}") from error
        self._facts = facts or host_facts()
        self._devices = self._enumerate()
        self._xid = XidWatch(self._devices)
        self._dcgm = dcgm or DcgmActivity()

    def close(self) -> None:
        self._xid.close()
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
        topology = _pcie_topology(self._devices)
        return [
            self._inventory_of(device, by_bus_id, topology.get(device.uuid, {}))
            for device in self._devices
        ]

    def _inventory_of(
        self, device: _Device, by_bus_id: dict[str, str], topology: dict[str, str]
    ) -> GpuInventory:
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
            pcie_link_gen=_link(read_field(pynvml.nvmlDeviceGetCurrPcieLinkGeneration, handle)),
            pcie_link_width=_link(read_field(pynvml.nvmlDeviceGetCurrPcieLinkWidth, handle)),
            pcie_link_gen_max=_link(read_field(pynvml.nvmlDeviceGetMaxPcieLinkGeneration, handle)),
            pcie_link_width_max=_link(read_field(pynvml.nvmlDeviceGetMaxPcieLinkWidth, handle)),
            pcie_topology=topology,
        )

    def metrics(self, busy_devices: Sequence[str] = ()) -> list[GpuMetrics]:
        xids = self._xid.drain()
        activity = self._dcgm.read()
        return [_metrics_of(device, xids.get(device.uuid), activity) for device in self._devices]


def _metrics_of(
    device: _Device, xid_errors: list[int] | None, activity: InstanceActivity | None = None
) -> GpuMetrics:
    handle = device.handle
    utilization = read_field(pynvml.nvmlDeviceGetUtilizationRates, handle)
    memory = read_field(pynvml.nvmlDeviceGetMemoryInfo, handle)
    temperature = read_field(pynvml.nvmlDeviceGetTemperature, handle, pynvml.NVML_TEMPERATURE_GPU)
    power_mw = read_field(pynvml.nvmlDeviceGetPowerUsage, handle)
    # The enforced limit is the one the GPU holds to (the lowest of the admin's, the board's
    # and the system's); older drivers only have the management limit.
    limit_mw = read_field(pynvml.nvmlDeviceGetEnforcedPowerLimit, handle)
    if limit_mw is None:
        limit_mw = read_field(pynvml.nvmlDeviceGetPowerManagementLimit, handle)
    fan = read_field(pynvml.nvmlDeviceGetFanSpeed, handle)
    tx = read_field(pynvml.nvmlDeviceGetPcieThroughput, handle, pynvml.NVML_PCIE_UTIL_TX_BYTES)
    rx = read_field(pynvml.nvmlDeviceGetPcieThroughput, handle, pynvml.NVML_PCIE_UTIL_RX_BYTES)
    # Per-slice readings only for a GPU in MIG mode (left out otherwise, as an older agent).
    extra: dict[str, Any] = {}
    mig_modes = read_field(pynvml.nvmlDeviceGetMigMode, handle)
    if mig_modes and mig_modes[0] == pynvml.NVML_DEVICE_MIG_ENABLE:
        extra["slices"] = _slice_metrics(device, activity or {})
    return GpuMetrics(
        uuid=device.uuid,
        utilization_pct=float(utilization.gpu) if utilization is not None else None,
        memory_used_mb=int(memory.used // _MIB) if memory is not None else None,
        temperature_c=float(temperature) if temperature is not None else None,
        power_w=power_mw / 1000.0 if power_mw is not None else None,
        power_limit_w=limit_mw / 1000.0 if limit_mw is not None else None,
        fan_pct=float(fan) if fan is not None else None,
        pcie_tx_kbps=int(tx) if tx is not None else None,
        pcie_rx_kbps=int(rx) if rx is not None else None,
        ecc_corrected_volatile=_ecc_count(handle, pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED),
        ecc_uncorrected_volatile=_ecc_count(handle, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED),
        xid_errors=xid_errors,
        health=read_health(handle, device.uuid),
        **extra,
    )


def _slice_metrics(device: _Device, activity: InstanceActivity) -> list[SliceMetrics]:
    """Each MIG instance's memory in use and running CUDA processes (NVML, on the MIG device
    handle); its utilisation from DCGM's ``activity`` by GPU instance id, else None (NVML's
    nvmlDeviceGetUtilizationRates is not supported on MIG devices)."""
    readings: list[SliceMetrics] = []
    handle = device.handle
    count = read_field(pynvml.nvmlDeviceGetMaxMigDeviceCount, handle) or 0
    for slot in range(count):
        mig = read_field(pynvml.nvmlDeviceGetMigDeviceHandleByIndex, handle, slot)
        if mig is None:
            continue
        uuid = _read_text(pynvml.nvmlDeviceGetUUID, mig)
        if not uuid:
            continue
        memory = read_field(pynvml.nvmlDeviceGetMemoryInfo, mig)
        # Left out (not None) where NVML does not say, as an older agent does.
        known: dict[str, Any] = {}
        processes = read_field(pynvml.nvmlDeviceGetComputeRunningProcesses, mig)
        if processes is not None:
            known["processes"] = len(processes)
        instance_id = read_field(pynvml.nvmlDeviceGetGpuInstanceId, mig)
        busy = None if instance_id is None else activity.get((device.index, int(instance_id)))
        readings.append(
            SliceMetrics(
                uuid=uuid,
                memory_used_mb=int(memory.used // _MIB) if memory is not None else None,
                utilization_pct=busy,
                **known,
            )
        )
    return readings


def _link(value: int | None) -> int | None:
    """A PCIe generation or lane count; None for what no link can be (an unset sentinel)."""
    if value is None or not 0 <= int(value) <= _LINK_MAX:
        return None
    return int(value)


def _ecc_count(handle: Any, error_type: int) -> int | None:
    """Errors since the driver loaded; None on a card without ECC or with ECC turned off."""
    count = read_field(
        pynvml.nvmlDeviceGetTotalEccErrors, handle, error_type, pynvml.NVML_VOLATILE_ECC
    )
    return int(count) if count is not None else None


class XidWatch:
    """XID critical errors of the GPUs that report them, through one NVML event set."""

    def __init__(self, devices: Sequence[_Device]) -> None:
        self._event_set: Any = None
        self._watched: list[str] = []
        self._uuid_at = {
            address: d.uuid for d in devices if (address := _address(d.handle)) is not None
        }
        xid = pynvml.nvmlEventTypeXidCriticalError
        candidates = [
            d
            for d in devices
            if (read_field(pynvml.nvmlDeviceGetSupportedEventTypes, d.handle) or 0) & xid
        ]
        if not candidates:
            return
        event_set = read_field(pynvml.nvmlEventSetCreate)
        if event_set is None:
            logger.info("NVML event sets are not available: XID errors are not reported")
            return
        for device in candidates:
            if succeeds(pynvml.nvmlDeviceRegisterEvents, device.handle, xid, event_set):
                self._watched.append(device.uuid)
        if self._watched:
            self._event_set = event_set
        else:
            succeeds(pynvml.nvmlEventSetFree, event_set)

    @property
    def watched(self) -> list[str]:
        return list(self._watched)

    def drain(self) -> dict[str, list[int]]:
        """The XID codes seen since the last drain, per watched GPU UUID; never waits."""
        found: dict[str, list[int]] = {uuid: [] for uuid in self._watched}
        if self._event_set is None:
            return found
        for _ in range(_XID_EVENTS_PER_READ):
            try:
                event = pynvml.nvmlEventSetWait(self._event_set, 0)
            except pynvml.NVMLError_Timeout:
                break  # nothing (more) is waiting
            except pynvml.NVMLError as error:
                logger.warning("reading NVML XID events failed: %s", error)
                break
            if not event.eventType & pynvml.nvmlEventTypeXidCriticalError:
                continue
            code = int(event.eventData)
            uuid = _read_text(pynvml.nvmlDeviceGetUUID, event.device) or self._uuid_at.get(
                _address(event.device) or -1
            )
            if uuid not in found:
                logger.warning("XID %d on a GPU NVML does not name (%s)", code, uuid)
                continue
            logger.warning("XID %d on GPU %s", code, uuid)
            if len(found[uuid]) < XID_ERRORS_MAX:
                found[uuid].append(code)
            else:
                logger.warning(
                    "more than %d XIDs on GPU %s: %d dropped", XID_ERRORS_MAX, uuid, code
                )
        return found

    def close(self) -> None:
        if self._event_set is not None:
            succeeds(pynvml.nvmlEventSetFree, self._event_set)
            self._event_set = None


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
        if not uuid:
            continue
        start = _instance_start(handle, mig)
        instances.append(
            MigInstance(
                uuid=uuid,
                profile=mig_profile_from_name(name),
                memory_mb=int(memory.total // _MIB) if memory is not None else 0,
                **({} if start is None else {"start": start}),
            )
        )
    return instances


def _instance_start(parent: Any, mig: Any) -> int | None:
    """The first memory slice of a MIG device's GPU instance (its placement), None where
    NVML does not say (reading a GPU instance may need privileges the agent lacks)."""
    instance_id = read_field(pynvml.nvmlDeviceGetGpuInstanceId, mig)
    if instance_id is None:
        return None
    instance = read_field(pynvml.nvmlDeviceGetGpuInstanceById, parent, int(instance_id))
    info = read_field(pynvml.nvmlGpuInstanceGetInfo, instance) if instance is not None else None
    return int(info.placement.start) if info is not None else None


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


def _address(handle: Any) -> int | None:
    """Where an NVML device handle points (a fresh pointer object compares unequal)."""
    try:
        return ctypes.cast(handle, ctypes.c_void_p).value
    except (TypeError, ctypes.ArgumentError):
        return None


def _pcie_topology(devices: Sequence[_Device]) -> dict[str, dict[str, str]]:
    """For each GPU, every other GPU's closest common PCI ancestor; unknown pairs left out."""
    topology: dict[str, dict[str, str]] = {d.uuid: {} for d in devices}
    for i, first in enumerate(devices):
        for second in devices[i + 1 :]:
            level = read_field(
                pynvml.nvmlDeviceGetTopologyCommonAncestor, first.handle, second.handle
            )
            if level is None:
                continue
            name = PCIE_TOPOLOGY_LEVELS.get(int(level), f"level-{int(level)}")
            topology[first.uuid][second.uuid] = name
            topology[second.uuid][first.uuid] = name
    return topology


def _normal_bus_id(bus_id: str) -> str:
    # NVML mixes 8- and 4-digit PCI domains ("00000000:07:00.0" vs "0000:07:00.0").
    domain, _, rest = bus_id.lower().partition(":")
    try:
        return f"{int(domain or '0', 16):x}:{rest}"
    except ValueError:
        return bus_id.lower()
