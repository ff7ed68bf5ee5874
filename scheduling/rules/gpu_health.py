"""When a GPU or a node is cordoned for ill health, as pure functions of plain data (no
Django, no I/O); ``scheduling.services.gpu_cordon`` applies them (docs/monitoring.md
"Sick GPUs").

A GPU is cordoned by any *new* fatal sign in a heartbeat (:func:`gpu_causes`):

- an XID error of a fatal kind (:data:`FATAL_XIDS`);
- more volatile uncorrectable ECC errors than its previous report said;
- retired pages or remapped rows newly waiting for a reset, a row remap that failed;
- NVML lost the GPU (or it vanished).

"New" because these readings last until the GPU is reset: a sign that is still there after
an admin uncordoned the GPU (knowing it) does not cordon it again; a new one does. A node
is cordoned when :data:`NODE_FAILURES` desktops failed to start on it within
:data:`NODE_FAILURE_WINDOW` (:func:`node_should_cordon`), counting only failures after its
last uncordon. Hysteresis: nothing here ever lifts a cordon (:func:`next_cordoned`); only a
person does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

# XIDs after which the GPU must not take new work until someone looked at it (NVIDIA's
# XID catalogue): 48 double-bit ECC error, 63/64 ECC page retirement or row remap
# recording (failure), 74 NVLink error, 79 fallen off the bus, 94/95 contained and
# uncontained ECC errors.
FATAL_XIDS = frozenset({48, 63, 64, 74, 79, 94, 95})

# The causes, as stored (``Gpu.cordon_reason``, comma-separated) and shown in words
# (``scheduling.labels.cordon_cause``). An XID is "xid:<code>".
ECC_UNCORRECTED = "ecc_uncorrected"
RETIRED_PAGES_PENDING = "retired_pages_pending"
ROW_REMAP_PENDING = "row_remap_pending"
ROW_REMAP_FAILED = "row_remap_failed"
LOST = "lost"
START_FAILURES = "start_failures"  # a node's: desktops keep failing to start there
HEALTH_FLAGS = (LOST, RETIRED_PAGES_PENDING, ROW_REMAP_PENDING, ROW_REMAP_FAILED)

NODE_FAILURES = 3
NODE_FAILURE_WINDOW = timedelta(minutes=10)


def xid_cause(code: int) -> str:
    return f"xid:{code}"


def _health(metrics: Mapping[str, Any] | None) -> Mapping[str, Any]:
    health = (metrics or {}).get("health")
    return health if isinstance(health, Mapping) else {}


def _count(metrics: Mapping[str, Any] | None) -> int:
    value = (metrics or {}).get("ecc_uncorrected_volatile")
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def gpu_causes(before: Mapping[str, Any] | None, now: Mapping[str, Any]) -> tuple[str, ...]:
    """The fatal signs in a GPU's report ``now`` (``nodeagent.protocol.GpuMetrics`` on the
    wire) that its previous report ``before`` did not have; in a fixed order, no repeats."""
    causes: list[str] = []
    xids = now.get("xid_errors")
    for code in xids if isinstance(xids, list) else []:
        if isinstance(code, int) and code in FATAL_XIDS and xid_cause(code) not in causes:
            causes.append(xid_cause(code))
    if _count(now) > _count(before):
        causes.append(ECC_UNCORRECTED)
    was, is_ = _health(before), _health(now)
    causes.extend(
        flag for flag in HEALTH_FLAGS if is_.get(flag) is True and was.get(flag) is not True
    )
    return tuple(causes)


def next_cordoned(cordoned: bool, causes: Iterable[str]) -> bool:
    """Cordoned after this report: a new cause cordons; nothing uncordons (hysteresis)."""
    return cordoned or any(True for _ in causes)


def node_should_cordon(
    failures: Sequence[datetime],
    now: datetime,
    cleared_at: datetime | None = None,
    count: int = NODE_FAILURES,
    window: timedelta = NODE_FAILURE_WINDOW,
) -> bool:
    """Whether ``count`` start failures fell within ``window`` before ``now``, counting only
    those after the node's last uncordon ``cleared_at``."""
    since = now - window
    recent = [
        at for at in failures if since < at <= now and (cleared_at is None or at > cleared_at)
    ]
    return len(recent) >= count


def merge_causes(stored: str, new: Iterable[str]) -> str:
    """The stored causes (comma-separated) with the new ones added once, in order."""
    causes = [c for c in stored.split(",") if c]
    causes.extend(c for c in new if c not in causes)
    return ",".join(causes)
