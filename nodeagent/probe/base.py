"""What every GPU probe shares: the node facts it reports, and its interface."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

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
