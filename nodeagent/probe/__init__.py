"""GPU probes: real NVML, or a clearly labelled simulated fleet read from YAML.

The shared names live in :mod:`nodeagent.probe.base` and are re-exported here.
"""

from __future__ import annotations

from nodeagent.config import AgentConfig
from nodeagent.mps import MpsSupervisor
from nodeagent.probe.base import GpuProbe, NodeFacts, host_facts
from nodeagent.probe.nvml import NvmlProbe
from nodeagent.probe.shares import SharingProbe
from nodeagent.probe.simulated import SimulatedProbe, load_fleet

__all__ = ["GpuProbe", "NodeFacts", "host_facts", "make_probe"]


def make_probe(config: AgentConfig, mps: MpsSupervisor | None = None) -> GpuProbe:
    """The simulated fleet probe when a fleet file is configured, NVML otherwise; GPUs in
    share mode (DESKPOOL_GPU_SHARES) are shared through ``mps`` where it runs."""
    if config.fleet_file is not None:
        fleet = load_fleet(config.fleet_file)
        return SimulatedProbe(fleet.node(config.node_name))
    probe = NvmlProbe(facts=host_facts(config.labels))
    if mps is None:
        return probe
    return SharingProbe(probe, config.gpu_shares, mps)
