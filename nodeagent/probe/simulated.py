"""A SIMULATED GPU fleet, read from YAML (see ``nodeagent/fleets/demo.yaml``).

Nothing here touches hardware. The inventory has the same shape as the NVML probe's,
with ``simulated: true`` on every GPU, and the metrics drift with the number of
sessions running on each GPU so the portal's dashboards and alert rules have
something plausible to show. The metrics carry every key the NVML probe sends: the
power limit is the fleet file's ``power_limit_w``, the fan follows the temperature, PCIe
traffic follows utilisation, ECC counts are 0 and no XID ever happens unless a GPU is made
sick (the fleet file's ``fault``, or ``SimulatedProbe.inject_fault``). A GPU in MIG mode
sends SIMULATED per-instance readings (``slices``): a busy instance uses
MEMORY_PER_SESSION_MB plus noise, capped at its size, and a made-up utilisation (which NVML
itself does not give). (Real A100 SXM and T4 boards are passively cooled and report no fan
at all: the simulated fan is made up.)
"""

from __future__ import annotations

import random
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from nodeagent.probe.base import NodeFacts
from nodeagent.protocol import GpuHealth, GpuInventory, GpuMetrics, SliceMetrics

# Fixed namespace: the same node/GPU/slot always gives the same UUID.
_UUID_NAMESPACE = uuid.UUID("6f1c9a52-3d0e-4b8e-9c4a-0de5c0a1f00d")

IDLE_TEMPERATURE_C = 32.0
# How far one busy slice pushes its GPU; a simulated desktop is a light load.
UTILIZATION_PER_SESSION_PCT = 30.0
MEMORY_PER_SESSION_MB = 2048
# Fraction of the gap to the target temperature closed per metrics call.
THERMAL_SMOOTHING = 0.35
# The fan idles at this speed and reaches 100% at FAN_FULL_C.
FAN_IDLE_PCT = 30.0
FAN_FULL_C = 72.0
# PCIe traffic (KB/s) of a fully busy GPU: a remote desktop sends frames to the host.
PCIE_TX_FULL_KBPS = 2_000_000
PCIE_RX_FULL_KBPS = 500_000
PCIE_IDLE_KBPS = 200


class FleetError(ValueError):
    """The fleet file is malformed or does not name the requested node."""


def simulated_gpu_uuid(node: str, index: int) -> str:
    return f"GPU-{uuid.uuid5(_UUID_NAMESPACE, f'{node}/gpu{index}')}"


def simulated_mig_uuid(node: str, index: int, slot: int) -> str:
    return f"MIG-{uuid.uuid5(_UUID_NAMESPACE, f'{node}/gpu{index}/mig{slot}')}"


@dataclass(frozen=True)
class SimulatedGpu:
    inventory: GpuInventory
    power_limit_w: float
    # A sick GPU for the demo and tests (the fleet file's ``fault``): see inject_fault.
    fault: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class SimulatedNode:
    name: str
    facts: NodeFacts
    gpus: list[SimulatedGpu]


@dataclass(frozen=True)
class Fleet:
    nodes: list[SimulatedNode] = field(default_factory=list)

    def node(self, name: str) -> SimulatedNode:
        for node in self.nodes:
            if node.name == name:
                return node
        known = ", ".join(node.name for node in self.nodes) or "none"
        raise FleetError(f"node {name!r} is not in the fleet file (nodes there: {known})")

    def names(self) -> list[str]:
        return [node.name for node in self.nodes]


def load_fleet(path: Path) -> Fleet:
    """Read a fleet YAML file into simulated nodes."""
    try:
        document = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as error:
        raise FleetError(f"cannot read fleet file {path}: {error}") from error
    if not isinstance(document, dict) or not isinstance(document.get("nodes"), list):
        raise FleetError(f"fleet file {path} needs a top-level 'nodes' list")
    return Fleet(nodes=[_parse_node(raw) for raw in document["nodes"]])


def _parse_node(raw: dict[str, Any]) -> SimulatedNode:
    name = str(raw["name"])
    gpus: list[SimulatedGpu] = []
    for group in raw.get("gpus", []):
        first = len(gpus)
        for offset in range(int(group.get("count", 1))):
            gpus.append(_parse_gpu(name, first + offset, group))
        if group.get("nvlink", "none") == "all-to-all":
            gpus[first:] = _link_all_to_all(gpus[first:])
    facts = NodeFacts(
        cpu_count=int(raw.get("cpu_count", 16)),
        memory_mb=int(raw.get("memory_mb", 65536)),
        labels={str(key): str(value) for key, value in (raw.get("labels") or {}).items()},
    )
    return SimulatedNode(name=name, facts=facts, gpus=gpus)


def _parse_gpu(node: str, index: int, group: dict[str, Any]) -> SimulatedGpu:
    sharing = str(group.get("sharing", "whole"))
    if sharing not in ("mig", "share", "whole"):
        raise FleetError(f"{node}: sharing must be mig, share or whole, not {sharing!r}")
    memory_mb = int(group["memory_mb"])
    fields: dict[str, Any] = {
        "uuid": simulated_gpu_uuid(node, index),
        "index": index,
        "name": str(group["name"]),
        "memory_mb": memory_mb,
        "compute_capability": str(group["compute_capability"]),
        "mig_mode": sharing == "mig",
        "mig_instances": [
            {
                "uuid": simulated_mig_uuid(node, index, slot),
                "profile": str(instance["profile"]),
                "memory_mb": int(instance["memory_mb"]),
            }
            for slot, instance in enumerate(
                group.get("mig_instances", []) if sharing == "mig" else []
            )
        ],
        "nvlink_peers": [],
        # Same shape as NVML's bus ids; SXM boards spread the GPUs over the PCI tree.
        "pci_bus_id": f"00000000:{0x07 + index * 0x10:02X}:00.0",
        "sharing": sharing,
        "simulated": True,
    }
    if sharing == "share":  # set only then: a GPU of another kind sends neither
        fields["share_count"] = int(group.get("share_count", 1))
        fields["share_memory_mb"] = int(group.get("share_memory_mb", memory_mb))
    try:
        inventory = GpuInventory.model_validate(fields)
    except ValidationError as error:
        raise FleetError(f"{node}: GPU {index} is not a valid GPU inventory: {error}") from None
    return SimulatedGpu(
        inventory=inventory,
        power_limit_w=float(group.get("power_limit_w", 300)),
        fault=check_fault(node, dict(group.get("fault") or {})),
    )


# What a simulated GPU can be made to report (the NVML probe reads them from the card).
FAULT_FIELDS = frozenset(
    {"xid_errors", "ecc_uncorrected_volatile", "lost", "retired_pages_pending"}
    | {"row_remap_pending", "row_remap_failed"}
)


def check_fault(node: str, fault: dict[str, Any]) -> dict[str, Any]:
    unknown = set(fault) - FAULT_FIELDS
    if unknown:
        raise FleetError(
            f"{node}: a GPU fault names {sorted(unknown)}; known: {sorted(FAULT_FIELDS)}"
        )
    return fault


def _link_all_to_all(gpus: list[SimulatedGpu]) -> list[SimulatedGpu]:
    """The same GPUs, each with all the others as its NVLink peers."""
    uuids = [gpu.inventory.uuid for gpu in gpus]
    return [
        replace(
            gpu,
            inventory=gpu.inventory.model_copy(
                update={"nvlink_peers": [peer for peer in uuids if peer != gpu.inventory.uuid]}
            ),
        )
        for gpu in gpus
    ]


class SimulatedProbe:
    """Probe for one SIMULATED node of a fleet file."""

    simulated = True

    def __init__(self, node: SimulatedNode, seed: int | None = None) -> None:
        self._node = node
        self._random = random.Random(seed if seed is not None else node.name)
        self._temperature = {gpu.inventory.uuid: IDLE_TEMPERATURE_C for gpu in node.gpus}
        self._parent_of: dict[str, str] = {}
        self._faults = {gpu.inventory.uuid: dict(gpu.fault) for gpu in node.gpus if gpu.fault}
        for gpu in node.gpus:
            self._parent_of[gpu.inventory.uuid] = gpu.inventory.uuid
            for instance in gpu.inventory.mig_instances:
                self._parent_of[instance.uuid] = gpu.inventory.uuid

    @property
    def node(self) -> SimulatedNode:
        return self._node

    def node_facts(self) -> NodeFacts:
        return self._node.facts

    def inventory(self) -> list[GpuInventory]:
        return [gpu.inventory for gpu in self._node.gpus]  # frozen: nobody changes the fleet

    def metrics(self, busy_devices: Sequence[str] = ()) -> list[GpuMetrics]:
        sessions_on = Counter(
            self._parent_of[device] for device in busy_devices if device in self._parent_of
        )
        busy = set(busy_devices)
        return [
            self._metrics_of(gpu, sessions_on[gpu.inventory.uuid], busy) for gpu in self._node.gpus
        ]

    def inject_fault(self, uuid_: str, **fault: Any) -> None:
        """Make a GPU sick from the next metrics on: its XIDs are reported once, the rest
        (ECC count, lost, pending retirement or remap) until the probe is made again."""
        self._faults[uuid_] = {**self._faults.get(uuid_, {}), **check_fault(self._node.name, fault)}

    def _fault_fields(self, uuid_: str) -> dict[str, Any]:
        fault = self._faults.get(uuid_)
        if not fault:
            return {}
        fields: dict[str, Any] = {"xid_errors": list(fault.pop("xid_errors", []))}
        if "ecc_uncorrected_volatile" in fault:
            fields["ecc_uncorrected_volatile"] = int(fault["ecc_uncorrected_volatile"])
        health = {k: bool(v) for k, v in fault.items() if k in GpuHealth.model_fields}
        if health:
            fields["health"] = GpuHealth(**health)
        return fields

    def _slices_of(self, gpu: SimulatedGpu, busy: set[str]) -> list[SliceMetrics]:
        readings = []
        for instance in gpu.inventory.mig_instances:
            used = instance.uuid in busy
            memory = MEMORY_PER_SESSION_MB if used else 0
            memory = min(instance.memory_mb, memory + int(self._random.uniform(0, 32)))
            utilization = (
                self._random.uniform(40.0, 90.0) if used else self._random.uniform(0.0, 2.0)
            )
            readings.append(
                SliceMetrics(
                    uuid=instance.uuid,
                    memory_used_mb=memory,
                    utilization_pct=round(utilization, 1),
                )
            )
        return readings

    def _metrics_of(self, gpu: SimulatedGpu, sessions: int, busy: set[str]) -> GpuMetrics:
        uuid_ = gpu.inventory.uuid
        noise = self._random.uniform(-3.0, 3.0)
        utilization = min(100.0, max(0.0, sessions * UTILIZATION_PER_SESSION_PCT + noise))
        if sessions == 0:
            utilization = self._random.uniform(0.0, 2.0)
        memory_used = min(gpu.inventory.memory_mb, sessions * MEMORY_PER_SESSION_MB)
        memory_used += int(self._random.uniform(0, 64))
        target = IDLE_TEMPERATURE_C + 0.45 * utilization
        self._temperature[uuid_] += THERMAL_SMOOTHING * (target - self._temperature[uuid_])
        idle_power = gpu.power_limit_w * 0.15
        power = idle_power + (gpu.power_limit_w - idle_power) * utilization / 100.0
        temperature = self._temperature[uuid_]
        heat = (temperature - IDLE_TEMPERATURE_C) / (FAN_FULL_C - IDLE_TEMPERATURE_C)
        fan = FAN_IDLE_PCT + (100.0 - FAN_IDLE_PCT) * min(1.0, max(0.0, heat))
        load = utilization / 100.0
        extra: dict[str, Any] = {"health": GpuHealth()}
        if gpu.inventory.mig_mode:
            extra["slices"] = self._slices_of(gpu, busy)
        extra.update(self._fault_fields(uuid_))
        return GpuMetrics(
            uuid=uuid_,
            utilization_pct=round(utilization, 1),
            memory_used_mb=memory_used,
            temperature_c=round(temperature, 1),
            power_w=round(power, 1),
            power_limit_w=gpu.power_limit_w,
            fan_pct=round(fan, 1),
            pcie_tx_kbps=PCIE_IDLE_KBPS + int(PCIE_TX_FULL_KBPS * load),
            pcie_rx_kbps=PCIE_IDLE_KBPS + int(PCIE_RX_FULL_KBPS * load),
            ecc_corrected_volatile=0,
            **{"ecc_uncorrected_volatile": 0, "xid_errors": [], **extra},
        )

    def close(self) -> None:
        return None
