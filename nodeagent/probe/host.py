"""Facts about the real host the agent runs on: CPU model and flags, NUMA layout.

Read from ``/proc/cpuinfo`` and ``/sys/devices/system/node`` at every registration and
reported as node labels, so a new node joins the pool with them and placement rules
can ask for, say, ``avx512f`` or a node with two NUMA nodes. Every file is optional: a
missing or unreadable one just leaves its labels out (containers, non-Linux hosts, arm64
without ``model name``).

Labels (all strings, like every node label):

``cpu_model``
    The first ``model name`` in ``/proc/cpuinfo`` (x86); on arm64, which has none, the
    core named from ``CPU implementer`` and ``CPU part`` (e.g. ``ARM Neoverse-V2``).
``cpu_flags``
    The flags of :data:`FLAGS_OF_INTEREST` the CPU has, space separated, sorted (the
    ``flags`` line on x86, ``Features`` on arm). Empty when it has none of them.
``numa_nodes``
    How many NUMA nodes are online.
``numa_cpus``
    Each node's CPU list as the kernel writes it, ``node=list`` joined by ``;``, for
    example ``0=0-27,56-83;1=28-55,84-111``.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from pathlib import Path

logger = logging.getLogger(__name__)

# Flags a desktop's workload (compilers, BLAS, inference runtimes) cares about. The full
# list is a hundred words per CPU; these are the ones worth a placement rule.
FLAGS_OF_INTEREST = frozenset(
    {
        # x86
        "sse4_2", "avx", "avx2", "fma", "f16c", "aes", "sha_ni", "avx_vnni",
        "avx512f", "avx512dq", "avx512cd", "avx512bw", "avx512vl", "avx512_vnni",
        "avx512_bf16", "avx512_fp16", "avx512ifma", "avx512vbmi",
        "amx_tile", "amx_bf16", "amx_int8", "amx_fp16",
        # arm64
        "asimd", "sve", "sve2", "bf16", "i8mm",
    }
)  # fmt: skip

LABEL_CPU_MODEL = "cpu_model"
LABEL_CPU_FLAGS = "cpu_flags"
LABEL_NUMA_NODES = "numa_nodes"
LABEL_NUMA_CPUS = "numa_cpus"
HOST_LABEL_KEYS = (LABEL_CPU_MODEL, LABEL_CPU_FLAGS, LABEL_NUMA_NODES, LABEL_NUMA_CPUS)

_NODE_DIR = re.compile(r"node(\d+)$")

# arm64 cores by (CPU implementer, CPU part), for the ones seen in GPU servers.
_ARM_CORES = {
    ("0x41", "0xd0c"): "ARM Neoverse-N1",
    ("0x41", "0xd40"): "ARM Neoverse-V1",
    ("0x41", "0xd49"): "ARM Neoverse-N2",
    ("0x41", "0xd4f"): "ARM Neoverse-V2",
    ("0xc0", "0xac3"): "Ampere-1",
}


def _read(path: Path) -> str | None:
    try:
        return path.read_text(errors="replace")
    except OSError as error:
        logger.debug("cannot read %s: %s", path, error)
        return None


def cpu_labels(cpuinfo: str) -> dict[str, str]:
    """``cpu_model`` and ``cpu_flags`` from the text of ``/proc/cpuinfo``."""
    model = implementer = part = ""
    flags: set[str] | None = None
    for line in cpuinfo.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key, value = key.strip().lower(), value.strip()
        if key == "model name" and not model:
            model = value
        elif key == "cpu implementer" and not implementer:
            implementer = value.lower()
        elif key == "cpu part" and not part:
            part = value.lower()
        elif key in ("flags", "features") and flags is None:
            flags = set(value.split())
    if not model and implementer and part:
        model = _ARM_CORES.get((implementer, part), f"arm implementer {implementer} part {part}")
    labels: dict[str, str] = {}
    if model:
        labels[LABEL_CPU_MODEL] = " ".join(model.split())
    if flags is not None:
        labels[LABEL_CPU_FLAGS] = " ".join(sorted(flags & FLAGS_OF_INTEREST))
    return labels


def numa_labels(node_root: Path) -> dict[str, str]:
    """``numa_nodes`` and ``numa_cpus`` from ``/sys/devices/system/node``."""
    if not node_root.is_dir():
        return {}
    nodes: dict[int, str] = {}
    try:
        entries = list(node_root.iterdir())
    except OSError as error:
        logger.debug("cannot list %s: %s", node_root, error)
        return {}
    for entry in entries:
        match = _NODE_DIR.match(entry.name)
        if match is None:
            continue
        cpulist = _read(entry / "cpulist")
        nodes[int(match.group(1))] = (cpulist or "").strip()
    if not nodes:
        return {}
    return {
        LABEL_NUMA_NODES: str(len(nodes)),
        LABEL_NUMA_CPUS: ";".join(f"{node}={nodes[node]}" for node in sorted(nodes)),
    }


def host_labels(proc_root: Path = Path("/proc"), sys_root: Path = Path("/sys")) -> dict[str, str]:
    """CPU and NUMA labels of this host; whatever cannot be read is left out."""
    labels: dict[str, str] = {}
    cpuinfo = _read(proc_root / "cpuinfo")
    if cpuinfo is not None:
        labels.update(cpu_labels(cpuinfo))
    labels.update(numa_labels(sys_root / "devices" / "system" / "node"))
    return labels


def merged_labels(host: Mapping[str, str], *explicit: Mapping[str, str]) -> dict[str, str]:
    """Host labels under the explicit ones (fleet file, ``DESKPOOL_LABELS``): later win."""
    labels = dict(host)
    for layer in explicit:
        labels.update(layer)
    return labels
