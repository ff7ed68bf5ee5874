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
    ("dockerd", "Docker engine"),
    ("containerd", "Docker engine"),
)
# Every container's CPU: cgroup v1 keeps one sum for all of Docker's containers (an ended
# container's share stays in it); under cgroup v2 each running container has a scope.
DOCKER_CGROUP_V1 = Path("/sys/fs/cgroup/cpuacct/docker/cpuacct.usage")
DOCKER_SCOPES_V2 = Path("/sys/fs/cgroup/system.slice")


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


def container_cpu_s(container_id: str) -> float | None:
    """CPU seconds one running container has used so far (cgroup v1 or v2), or None."""
    try:
        return int((DOCKER_CGROUP_V1.parent / container_id / "cpuacct.usage").read_text()) / 1e9
    except (OSError, ValueError):
        pass
    used_us = _usage_us(DOCKER_SCOPES_V2 / f"docker-{container_id}.scope" / "cpu.stat")
    return None if used_us is None else used_us / 1e6


def _usage_us(stat: Path) -> int | None:
    """A cgroup v2 ``cpu.stat``'s ``usage_usec``, or None where it cannot be read."""
    try:
        fields = dict(line.split() for line in stat.read_text().splitlines())
        return int(fields.get("usage_usec", 0))
    except (OSError, ValueError):
        return None


def processes_started() -> int:
    """How many processes the machine has started since it booted (/proc/stat)."""
    with open("/proc/stat", encoding="ascii") as f:
        for line in f:
            if line.startswith("processes "):
                return int(line.split()[1])
    return 0


def containers_cpu_s() -> float | None:
    """CPU seconds Docker's containers have used so far (under cgroup v2 only the running
    ones'), or None where neither layout is there."""
    try:
        return int(DOCKER_CGROUP_V1.read_text()) / 1e9
    except (OSError, ValueError):
        pass
    scopes = list(DOCKER_SCOPES_V2.glob("docker-*.scope/cpu.stat"))
    if not scopes:
        return None
    return sum(_usage_us(stat) or 0 for stat in scopes) / 1e6


def machine_busy_s() -> float:
    """CPU seconds the whole machine has been busy so far (every CPU, every process and the
    kernel: /proc/stat's first line less idle and I/O wait)."""
    with open("/proc/stat", encoding="ascii") as f:
        fields = [int(n) for n in f.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    # guest time is counted in user time already
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def children_cpu_s() -> float:
    """CPU seconds of this process's children that have ended and been waited for."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def cpu_by_role(
    before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]]
) -> dict[str, float]:
    """Each role's CPU seconds between two snapshots (a process started between them counts
    whole; one that ended is lost)."""
    used: dict[str, float] = defaultdict(float)
    for pid, (role, seconds) in after.items():
        then = before.get(pid)
        used[role] += seconds - (then[1] if then and then[0] == role else 0.0)
    return used


def cpu_line(
    before: dict[int, tuple[str, float]],
    after: dict[int, tuple[str, float]],
    wall_s: float,
    **more: float,
) -> str:
    """Each role's CPU seconds between two snapshots (a process started between them counts
    whole; one that ended is lost), ``more`` (role -> seconds) beside them, and the share of
    the machine."""
    used = cpu_by_role(before, after)
    used.update({role.replace("_", " "): seconds for role, seconds in more.items()})
    cores = os.cpu_count() or 1
    ranked = sorted(used.items(), key=lambda kv: -kv[1])
    total = sum(used.values())
    return (
        f"CPU over {wall_s:.0f} s: "
        + ", ".join(f"{role} {seconds:.1f} s" for role, seconds in ranked)
        + f"; in all {total:.1f} s of the {cores} CPUs' {cores * wall_s:.0f} s"
    )
