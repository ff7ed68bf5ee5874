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


def role_of(pid: str) -> str | None:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return None
    return next((role for word, role in ROLES if word in cmdline), None)


def cpu_by_process() -> dict[int, tuple[str, float]]:
    """Every process on the machine with a role: pid -> (role, CPU seconds so far)."""
    found: dict[int, tuple[str, float]] = {}
    for pid in os.listdir("/proc"):
        if pid.isdigit() and (role := role_of(pid)) is not None:
            try:
                found[int(pid)] = (role, cpu_s(int(pid)))
            except OSError:
                continue
    return found


def children_cpu_s() -> float:
    """CPU seconds of this process's children that have ended and been waited for."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def cpu_line(
    before: dict[int, tuple[str, float]],
    after: dict[int, tuple[str, float]],
    wall_s: float,
    **more: float,
) -> str:
    """Each role's CPU seconds between two snapshots (a process started between them counts
    whole; one that ended is lost), ``more`` (role -> seconds) beside them, and the share of
    the machine."""
    used: dict[str, float] = defaultdict(float)
    for pid, (role, seconds) in after.items():
        then = before.get(pid)
        used[role] += seconds - (then[1] if then and then[0] == role else 0.0)
    used.update({role.replace("_", " "): seconds for role, seconds in more.items()})
    cores = os.cpu_count() or 1
    ranked = sorted(used.items(), key=lambda kv: -kv[1])
    total = sum(used.values())
    return (
        f"CPU over {wall_s:.0f} s: "
        + ", ".join(f"{role} {seconds:.1f} s" for role, seconds in ranked)
        + f"; in all {total:.1f} s of the {cores} CPUs' {cores * wall_s:.0f} s"
    )
