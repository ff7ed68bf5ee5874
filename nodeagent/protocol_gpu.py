"""The GPU readings' parts of the agent protocol (docs/agent-protocol.md): per-slice readings
and a GPU's health, as ``nodeagent.protocol.GpuMetrics`` carries them in each heartbeat.
Kept here so that ``protocol.py`` stays readable; ``nodeagent.protocol`` re-exports them."""

from __future__ import annotations

from pydantic import Field

from .wire_types import AgentMessage, Uuid


class SliceMetrics(AgentMessage):
    """One slice's live readings, where the driver reports them per slice; ``None`` where not.

    A MIG instance: its memory and CUDA processes (NVML), utilisation from DCGM or ``None``
    (docs/mig.md). Shares send none: a share is not a device.
    """

    uuid: Uuid = Field(description="The slice's device UUID (a MIG instance's).")
    memory_used_mb: int | None = Field(default=None, ge=0)
    utilization_pct: float | None = Field(default=None, ge=0, le=100)
    processes: int | None = Field(default=None, ge=0, description="CUDA processes running on it.")


class GpuHealth(AgentMessage):
    """What NVML says about a GPU's health beyond XIDs and ECC counts
    (``nodeagent.probe.gpu_health``); ``None`` where the card does not report it."""

    lost: bool = Field(default=False, description="NVML lost the GPU (GPU_IS_LOST) or it vanished.")
    retired_pages_pending: bool | None = Field(
        default=None, description="Pages retired for ECC errors wait for a GPU reset."
    )
    row_remap_pending: bool | None = Field(
        default=None, description="Rows remapped for ECC errors wait for a GPU reset."
    )
    row_remap_failed: bool | None = Field(
        default=None, description="A row remapping failed: the memory cannot be repaired."
    )
