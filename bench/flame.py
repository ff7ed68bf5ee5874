"""Sampling profiles of the stack's processes during a benchmark, and their flame summary.

``py-spy`` (``pip install py-spy``; not a dependency of the project) samples each process of a
role at 100 Hz, only while the thread holds the GIL or runs (no idle threads), into
collapsed stacks (``--format raw``: one line per distinct stack, frames separated by ``;``,
then the count). :func:`summary` reads them back: per role, the samples, and the functions
with the largest inclusive share (a function's samples wherever it is on the stack) and the
largest self share (where the CPU really was), so a note can say where the time went.
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

from bench.cpu import role_of

FRAME = re.compile(r"^(?P<func>[^ ]+) \((?P<file>[^:)]+)(?::\d+)?\)$")


class Profiler:
    """``py-spy record`` on every process of the machine with a role (bench.cpu's), from
    :meth:`start` to :meth:`stop`; the raw files are kept under ``folder``."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.running: list[tuple[str, subprocess.Popen]] = []

    @staticmethod
    def program() -> str:
        """py-spy, on the PATH or beside this Python (a virtual environment's bin/)."""
        beside = Path(sys.executable).parent / "py-spy"
        found = shutil.which("py-spy") or (str(beside) if beside.exists() else None)
        if found is None:
            raise SystemExit("--profile needs py-spy: .venv/bin/pip install py-spy")
        return found

    def start(self, pids_roles: dict[int, str]) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        for pid, role in pids_roles.items():
            if role.startswith(("PostgreSQL", "Redis")):
                continue  # not Python
            name = f"{role.split()[0].lower()}-{pid}.txt"
            argv = [self.program(), "record", "--format", "raw", "--rate", "100", "--nonblocking"]
            argv += ["--pid", str(pid), "--output", str(self.folder / name)]
            process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            self.running.append((role, process))

    def stop(self) -> None:
        for _, process in self.running:
            process.send_signal(signal.SIGINT)
        for _, process in self.running:
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()


def python_processes() -> dict[int, str]:
    """pid -> role, for every Python process of the stack (bench.cpu's roles)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or (role := role_of(entry.name)) is None:
            continue
        if b"python" in (entry / "cmdline").read_bytes():
            found[int(entry.name)] = role
    return found


def _label(frame: str) -> str:
    """``func (path:line)`` -> ``module.func``, shortened to the project's or the library's."""
    found = FRAME.match(frame.strip())
    if found is None:
        return frame.strip()
    path = found["file"]
    for marker in ("site-packages/", "/work/", "lib/python3.11/"):
        if marker in path:
            path = path.split(marker, 1)[1]
    if path.startswith("main/") or "/tree/" in path:
        path = path.split("/", 1)[1] if path.startswith("main/") else path.split("/tree/", 1)[1]
    return f"{path.removesuffix('.py').replace('/', '.')}.{found['func']}"


def read(file: Path) -> Counter[tuple[str, ...]]:
    stacks: Counter[tuple[str, ...]] = Counter()
    for line in file.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            stacks[tuple(_label(f) for f in stack.split(";") if f)] += int(count)
    return stacks


def summary(folder: Path, top: int = 15) -> list[str]:
    """Per role: the samples, the ``top`` inclusive and self functions with their shares."""
    by_role: dict[str, Counter[tuple[str, ...]]] = {}
    for file in sorted(folder.glob("*.txt")):
        by_role.setdefault(file.name.split("-")[0], Counter()).update(read(file))
    lines = []
    for role, stacks in by_role.items():
        total = sum(stacks.values()) or 1
        inclusive: Counter[str] = Counter()
        own: Counter[str] = Counter()
        for stack, count in stacks.items():
            for function in set(stack):
                inclusive[function] += count
            if stack:
                own[stack[-1]] += count
        lines.append(f"{role}: {total} samples (10 ms each)")
        lines.append("  inclusive (the function and what it called):")
        lines += [
            f"    {100 * n / total:5.1f} %  {f}"
            for f, n in inclusive.most_common(top * 3)
            if _ours(f)
        ][:top]
        lines.append("  self (where the CPU was):")
        lines += [f"    {100 * n / total:5.1f} %  {f}" for f, n in own.most_common(top)]
    return lines


def _ours(function: str) -> bool:
    """The project's own functions, and Django's and DRF's request handling."""
    return function.startswith(
        ("portal.", "scheduling.", "people.", "nodeagent.", "django.", "rest_framework.")
    )
