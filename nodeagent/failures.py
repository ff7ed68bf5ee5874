"""Why a desktop did not start, as a code the portal words in the reader's language.

The agent sends the code with a FAILED report (``SessionReport.failure``) next to the
engine's or runtime's own text (``reason``, kept for the admins). The code comes from that
text: Docker's refusals have stable wording, and the agent's own ones (image missing, no VNC
handshake in time) are written in :mod:`nodeagent.runtime`. Anything else is ``other``.
"""

from __future__ import annotations

import re

NOT_ENOUGH_CPUS = "not_enough_cpus"
NOT_ENOUGH_MEMORY = "not_enough_memory"
IMAGE_MISSING = "image_missing"
DEVICE_MISSING = "device_missing"
TIMEOUT = "timeout"
OUT_OF_MEMORY = "out_of_memory"
OTHER = "other"

FAILURE_CODES = (
    NOT_ENOUGH_CPUS,
    NOT_ENOUGH_MEMORY,
    IMAGE_MISSING,
    DEVICE_MISSING,
    TIMEOUT,
    OUT_OF_MEMORY,
    OTHER,
)

# First match wins; the patterns are the engine's and the agent's words (case ignored).
_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (code, re.compile(pattern, re.IGNORECASE))
    for code, pattern in (
        # "Range of CPUs is from 0.01 to 2.00, as there are only 2 CPUs available"
        (NOT_ENOUGH_CPUS, r"range of cpus is from|only \d+ cpus? available|cpus? .*exceed"),
        (OUT_OF_MEMORY, r"out of memory|oomkilled"),
        # "Minimum memory limit allowed is 6MB", "cannot allocate memory"
        (NOT_ENOUGH_MEMORY, r"memory limit|cannot allocate memory|not enough memory"),
        (
            IMAGE_MISSING,
            r"no such image|image \S+ is not present|image (\S+ )?not found|pull access denied"
            r"|manifest unknown|repository does not exist",
        ),
        (
            DEVICE_MISSING,
            r"could not select device driver|unknown or invalid runtime name|nvidia-container"
            r"|error gathering device information|no such device|devices? .*not found",
        ),
        (TIMEOUT, r"no vnc handshake|timed out|timeout"),
    )
)


def classify(text: str) -> str:
    """The failure code of a start error's text (``other`` when none is recognised)."""
    for code, pattern in _PATTERNS:
        if pattern.search(text):
            return code
    return OTHER
