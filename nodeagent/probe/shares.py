"""Share mode on real GPUs: the admin's ``DESKPOOL_GPU_SHARES``, kept only where MPS enforces it.

:class:`SharingProbe` wraps the NVML probe. A GPU the configuration puts in share mode is
reported as ``share`` (N shares of M MB) only while its MPS control daemon runs with the
caps (:mod:`nodeagent.mps`); a GPU in MIG mode keeps its MIG instances, and a GPU whose daemon
cannot run is reported whole. Each heartbeat looks at the daemons (a dead one is started
again) and carries each shared GPU's ``share_health``, the reason included when it is whole.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from nodeagent.config import GpuShares
from nodeagent.mps import MpsHealth, MpsSupervisor
from nodeagent.probe.base import GpuProbe, NodeFacts
from nodeagent.protocol import GpuInventory, GpuMetrics

logger = logging.getLogger(__name__)

ALL_GPUS = "all"


def configured_shares(
    shares: Mapping[str, GpuShares], gpus: Sequence[GpuInventory]
) -> dict[str, GpuShares]:
    """The GPUs (UUID -> shares) the configuration puts in share mode: named by UUID, by
    index, or all; a GPU in MIG mode is left out (its instances are its slices)."""
    chosen: dict[str, GpuShares] = {}
    for gpu in gpus:
        wanted = shares.get(gpu.uuid) or shares.get(str(gpu.index)) or shares.get(ALL_GPUS)
        if wanted is None:
            continue
        if gpu.mig_mode:
            logger.warning(
                "GPU %s is in MIG mode: its MIG instances are offered, not shares", gpu.uuid
            )
            continue
        chosen[gpu.uuid] = wanted
    named = set(shares) - {ALL_GPUS}
    unknown = named - {g.uuid for g in gpus} - {str(g.index) for g in gpus}
    if unknown:
        logger.warning(
            "DESKPOOL_GPU_SHARES names GPUs this node does not have: %s", sorted(unknown)
        )
    return chosen


def shared_inventory(
    gpu: GpuInventory, shares: GpuShares | None, health: MpsHealth | None
) -> GpuInventory:
    """The GPU as the portal should offer it: shares only with a healthy daemon and room."""
    if shares is None or health is None:
        return gpu
    if not health.ok:
        logger.warning("GPU %s is offered whole: %s", gpu.uuid, health.reason)
        return gpu
    if shares.count * shares.memory_mb > gpu.memory_mb:
        logger.error(
            "GPU %s is offered whole: %d shares of %d MB need more than its %d MB",
            gpu.uuid,
            shares.count,
            shares.memory_mb,
            gpu.memory_mb,
        )
        return gpu
    return gpu.model_copy(
        update={
            "sharing": "share",
            "share_count": shares.count,
            "share_memory_mb": shares.memory_mb,
        }
    )


class SharingProbe:
    """A GPU probe whose GPUs in share mode are shared through MPS where it runs."""

    def __init__(
        self, probe: GpuProbe, shares: Mapping[str, GpuShares], mps: MpsSupervisor
    ) -> None:
        self._probe = probe
        self._shares = dict(shares)
        self.mps = mps
        self.simulated = probe.simulated
        self._shared: dict[str, GpuShares] = {}

    def node_facts(self) -> NodeFacts:
        return self._probe.node_facts()

    def inventory(self) -> list[GpuInventory]:
        """The probe's GPUs; each configured one's daemon started (or found) first."""
        gpus = self._probe.inventory()
        self._shared = configured_shares(self._shares, gpus)
        health = self.mps.ensure(self._shared)
        offered = [
            shared_inventory(gpu, self._shared.get(gpu.uuid), health.get(gpu.uuid)) for gpu in gpus
        ]
        self.mps.offer([gpu.uuid for gpu in offered if gpu.sharing == "share"])
        return offered

    def metrics(self, busy_devices: Sequence[str] = ()) -> list[GpuMetrics]:
        readings = self._probe.metrics(busy_devices)
        health = self.mps.check()
        return [
            reading.model_copy(update={"share_health": health[reading.uuid].text()})
            if reading.uuid in health
            else reading
            for reading in readings
        ]

    def close(self) -> None:
        # The daemons stay: the node's share desktops keep running when the agent stops.
        self._probe.close()
