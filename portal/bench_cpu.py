"""CPU time of processes, from ``/proc`` (Linux), for the benchmarks' "where the time goes"."""

from __future__ import annotations

import os
import resource
from collections import defaultdict
from pathlib import Path

# A process's role, by the first of these found in its command line.
ROLES = (
    ("daphne", "portal (ASGI)"),
    ("uvicorn", "portal (ASGI)"),
    ("worker", "Celery worker"),
    ("beat", "Celery beat"),
    ("nodeagent", "agents"),
    ("postgres", "PostgreSQL (all its databases)"),
    ("redis", "Redis"),
)


def cpu_s(pid: int) -> float:
    """User + system CPU seconds the process has used so far."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _role(pid: str) -> str | None:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return None
    return next((role for word, role in ROLES if word in cmdline), None)


def cpu_by_role() -> dict[str, float]:
    """CPU seconds so far of every process on the machine with a role, summed per role
    (processes that ended meanwhile drop out: compare snapshots of long-lived ones)."""
    totals: dict[str, float] = defaultdict(float)
    for pid in os.listdir("/proc"):
        if pid.isdigit() and (role := _role(pid)) is not None:
            try:
                totals[role] += cpu_s(int(pid))
            except OSError:
                continue
    return dict(totals)


def children_cpu_s() -> float:
    """CPU seconds of this process's children that have ended and been waited for."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def cpu_line(
    before: dict[str, float], after: dict[str, float], wall_s: float, **more: float
) -> str:
    """Each role's CPU seconds between two snapshots (and ``more``: role -> seconds), and
    the share of the machine."""
    used = {role: after[role] - before.get(role, 0.0) for role in after}
    used.update({role.replace("_", " "): seconds for role, seconds in more.items()})
    cores = os.cpu_count() or 1
    parts = [
        f"{role} {seconds:.1f} s" for role, seconds in sorted(used.items(), key=lambda kv: -kv[1])
    ]
    total = sum(used.values())
    return (
        f"CPU over {wall_s:.0f} s: "
        + ", ".join(parts)
        + f"; in all {total:.1f} s of the {cores} CPUs' {cores * wall_s:.0f} s"
    )
