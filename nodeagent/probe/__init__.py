"""GPU probes: real NVML, or a clearly labelled simulated fleet read from YAML.

The shared names live in :mod:`nodeagent.probe.base` and are re-exported here.
"""

from __future__ import annotations

from nodeagent.config import AgentConfig
from nodeagent.probe.base import GpuProbe, NodeFacts, host_facts
from nodeagent.probe.nvml import NvmlProbe
from nodeagent.probe.simulated import SimulatedProbe, load_fleet

__all__ = ["GpuProbe", "NodeFacts", "host_facts", "make_probe"]


def make_probe(config: AgentConfig) -> GpuProbe:
    """The simulated fleet probe when a fleet file is configured, NVML otherwise."""
    if config.fleet_file is not None:
        fleet = load_fleet(config.fleet_file)
        return SimulatedProbe(fleet.node(config.node_name))
    return NvmlProbe(facts=host_facts(config.labels))
