"""A GPU's health as NVML reports it: lost, retired pages or row remaps waiting for a reset.

XID critical errors and the volatile ECC counts are read by ``nodeagent.probe.nvml`` (the
XID event set and ``nvmlDeviceGetTotalEccErrors``); this module adds what the portal's
cordon rules (``scheduling.rules.gpu_health``) need besides them. Each read stands alone:
a card that does not support it (``NVMLError_NotSupported``) leaves that field ``None``.
"""

from __future__ import annotations

import logging
from typing import Any

import pynvml

from nodeagent.protocol import GpuHealth

logger = logging.getLogger(__name__)


def _read(read: Any, handle: Any) -> Any:
    """One NVML read; None where the card does not answer it (GPU_IS_LOST is raised on)."""
    try:
        return read(handle)
    except pynvml.NVMLError_GpuIsLost:
        raise
    except pynvml.NVMLError as error:
        if not isinstance(error, pynvml.NVMLError_NotSupported):
            logger.debug("NVML %s failed: %s", getattr(read, "__name__", read), error)
        return None


def read_health(handle: Any, uuid: str) -> GpuHealth:
    """The health of the GPU behind ``handle``, which the agent knows as ``uuid``.

    The GPU is lost when NVML answers GPU_IS_LOST for it, or when the handle no longer
    names that GPU (it vanished from the bus and another took its place)."""
    try:
        now_uuid = _read(pynvml.nvmlDeviceGetUUID, handle)
        if now_uuid is not None:
            now_uuid = now_uuid.decode() if isinstance(now_uuid, bytes) else str(now_uuid)
            if now_uuid != uuid:
                logger.error("GPU %s vanished (its handle now names %s)", uuid, now_uuid)
                return GpuHealth(lost=True)
        pages = _read(pynvml.nvmlDeviceGetRetiredPagesPendingStatus, handle)
        rows = _read(pynvml.nvmlDeviceGetRemappedRows, handle)
    except pynvml.NVMLError_GpuIsLost:
        logger.error("NVML lost GPU %s", uuid)
        return GpuHealth(lost=True)
    # nvmlDeviceGetRemappedRows: (corrected rows, uncorrected rows, pending, failure occurred)
    return GpuHealth(
        lost=False,
        retired_pages_pending=None if pages is None else pages == pynvml.NVML_FEATURE_ENABLED,
        row_remap_pending=None if rows is None else bool(rows[2]),
        row_remap_failed=None if rows is None else bool(rows[3]),
    )
