"""GPU probes: real NVML, or a clearly labelled simulated fleet read from YAML."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from nodeagent.config import AgentConfig
from nodeagent.protocol import GpuInventory, GpuMetrics


@dataclass(frozen=True)
class NodeFacts:
    """What registration reports about the node besides its GPUs."""

    cpu_count: int
    memory_mb: int
    labels: dict[str, str] = field(default_factory=dict)


class GpuProbe(Protocol):
    """Inventory once at registration, metrics at every heartbeat."""

    simulated: bool

    def node_facts(self) -> NodeFacts: ...

    def inventory(self) -> list[GpuInventory]: ...

    def metrics(self, busy_devices: Sequence[str] = ()) -> list[GpuMetrics]:
        """Current metrics; ``busy_devices`` lists one GPU/MIG UUID per running session slice."""
        ...

    def close(self) -> None: ...


def host_facts(labels: dict[str, str] | None = None) -> NodeFacts:
    """CPU count and memory of the machine the agent runs on."""
    pages = os.sysconf("SC_PHYS_PAGES")
    page_size = os.sysconf("SC_PAGE_SIZE")
    return NodeFacts(
        cpu_count=os.cpu_count() or 1,
        memory_mb=pages * page_size // (1024 * 1024),
        labels=dict(labels or {}),
    )


def make_probe(config: AgentConfig) -> GpuProbe:
    """The simulated fleet probe when a fleet file is configured, NVML otherwise."""
    if config.fleet_file is not None:
        from nodeagent.probe.simulated import SimulatedProbe, load_fleet

        fleet = load_fleet(config.fleet_file)
        return SimulatedProbe(fleet.node(config.node_name))
    from nodeagent.probe.nvml import NvmlProbe

    return NvmlProbe(facts=host_facts(config.labels))
