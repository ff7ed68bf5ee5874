"""Each MIG instance's activity, from DCGM where it answers (``dcgmi``); else nothing.

NVML has no utilisation per MIG instance (``nvmlDeviceGetUtilizationRates`` is not supported
on a MIG device). DCGM's profiling field 1001, ``DCGM_FI_PROF_GR_ENGINE_ACTIVE``, is: the
ratio of time the graphics/compute engine of each GPU instance was busy. The agent reads it
through the ``dcgmi`` command (the nv-hostengine service must run), when the binary exists:

- ``dcgmi discovery -c`` lists the instance hierarchy: a line ``-> I 0/1 ... (EntityID: 3)``
  is GPU 0's GPU instance 1, known to DCGM as GPU-I entity 3;
- ``dcgmi dmon -e 1001 -c 1 -i i:3,...`` prints one sample per entity (``GPU-I 3  0.527``).

Where the binary is missing, a command fails or times out, or its output has no figure,
:meth:`DcgmActivity.read` answers None and the probe reports no utilisation for the slices
(their running CUDA processes still say whether they are busy).
"""

from __future__ import annotations

import logging
import re
import shutil
import subprocess
from collections.abc import Callable, Sequence

logger = logging.getLogger(__name__)

GR_ENGINE_ACTIVE = "1001"
COMMAND_TIMEOUT_S = 10.0
# (GPU index, GPU instance id) -> percent busy
InstanceActivity = dict[tuple[int, int], float]
Runner = Callable[[Sequence[str]], str | None]

_HIERARCHY = re.compile(r"->\s*I\s+(\d+)/(\d+)\b.*?EntityID:\s*(\d+)")
_SAMPLE = re.compile(r"^\s*GPU-I\s+(\d+)\s+(\S+)\s*$")


def run_command(argv: Sequence[str]) -> str | None:
    """A command's output, or None when it fails, times out or cannot start."""
    try:
        done = subprocess.run(
            list(argv), capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.SubprocessError) as error:
        logger.debug("%s failed: %s", argv[0], error)
        return None
    if done.returncode != 0:
        logger.debug("%s answered %s: %s", " ".join(argv), done.returncode, done.stderr.strip())
        return None
    return done.stdout


def parse_hierarchy(text: str) -> dict[int, tuple[int, int]]:
    """GPU-I entity id -> (GPU index, GPU instance id), from ``dcgmi discovery -c``."""
    found: dict[int, tuple[int, int]] = {}
    for line in text.splitlines():
        match = _HIERARCHY.search(line)
        if match:  # a compute instance's line ("-> CI 0/1/0") does not match
            gpu, instance, entity = (int(group) for group in match.groups())
            found[entity] = (gpu, instance)
    return found


def parse_samples(text: str) -> dict[int, float]:
    """GPU-I entity id -> percent busy, from ``dcgmi dmon``; N/A and junk are left out."""
    found: dict[int, float] = {}
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if not match:
            continue
        try:
            ratio = float(match.group(2))
        except ValueError:
            continue  # N/A: not sampled yet
        if 0.0 <= ratio <= 1.0:
            found[int(match.group(1))] = round(ratio * 100.0, 2)
    return found


class DcgmActivity:
    """GR_ENGINE_ACTIVE per GPU instance through ``dcgmi`` (the module's docstring)."""

    def __init__(self, runner: Runner = run_command, binary: str | None = None) -> None:
        self._run = runner
        self._binary = binary if binary is not None else shutil.which("dcgmi")

    @property
    def available(self) -> bool:
        return bool(self._binary)

    def read(self) -> InstanceActivity | None:
        """Each GPU instance's activity now; None where DCGM does not answer."""
        if not self._binary:
            return None
        hierarchy = parse_hierarchy(self._run([self._binary, "discovery", "-c"]) or "")
        if not hierarchy:
            return None
        entities = ",".join(f"i:{entity}" for entity in sorted(hierarchy))
        argv = [self._binary, "dmon", "-e", GR_ENGINE_ACTIVE, "-c", "1", "-i", entities]
        samples = parse_samples(self._run(argv) or "")
        if not samples:
            return None
        return {hierarchy[e]: value for e, value in samples.items() if e in hierarchy}
