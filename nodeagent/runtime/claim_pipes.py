"""A warm desktop's claim without ``docker exec``: two named pipes in its password folder.

At a booked class's start a node claims dozens of warm desktops at once, and a ``docker exec``
(the engine's exec create, start and inspect, and runc entering the container) was most of a
claim's CPU on the node (``bench.agent --warm-together``). So a warm desktop listens for its
claim itself: the agent makes two pipes (FIFOs) in the desktop's password folder before the
start, and the image's ``deskpool-start`` reads one line from ``claim`` (blocked in the
kernel until then: no polling, no CPU), runs ``deskpool-claim --language <that line>`` and
writes its exit status to ``claimed``. The folder is the host's, mounted read-only; a pipe
is written to all the same.

The agent opens ``claimed`` for reading first (non-blocking), then ``claim`` for writing
(non-blocking: that fails at once where nothing reads it), writes the language, and waits a
bounded time for the status. Where nothing listens (an image from before these pipes, or a
warm desktop started by an agent from before them), :func:`ask` says so and the caller
claims with ``docker exec`` as before. After one claim the desktop's listener has ended; a
second claim (there is none: a warm desktop is claimed once) would find nothing listening.

Only root writes ``claim`` (mode 0644: the desktop's user reads it); ``claimed`` is writable
by the desktop's user (0622), read only during the claim, before the student has the
password (docs/security.md, "A warm desktop's claim pipes carry no secret").
"""

from __future__ import annotations

import contextlib
import errno
import os
import select
import time
from pathlib import Path

from nodeagent.runtime.base import StartFailed

CLAIM_PIPE = "claim"  # the agent writes the claimer's language (a line)
CLAIMED_PIPE = "claimed"  # the desktop writes deskpool-claim's exit status (a line)
ANSWER_S = 15.0  # deskpool-claim waits 2 s at most for the old session; the rest is slack
ANSWER_MAX_BYTES = 16
# Nothing reads the pipe (ENXIO), or there is no pipe (ENOENT): claim with docker exec.
NOT_LISTENING = (errno.ENXIO, errno.ENOENT)


def make(directory: Path) -> None:
    """The two pipes in ``directory`` (a warm desktop's password folder, before its start)."""
    for name, mode in ((CLAIM_PIPE, 0o644), (CLAIMED_PIPE, 0o622)):
        path = directory / name
        os.mkfifo(path)
        os.chmod(path, mode)  # not the umask's


def ask(directory: Path, language: str, timeout_s: float = ANSWER_S) -> int | None:
    """Have the warm desktop whose password folder is ``directory`` claimed for ``language``
    (``en``, ``zh-hans`` or ``""``): deskpool-claim's exit status, or None where the desktop
    does not listen (claim it with ``docker exec``). StartFailed if it listened and did not
    answer within ``timeout_s``, or answered something other than a status."""
    answers = _open(directory / CLAIMED_PIPE, os.O_RDONLY, "the claim's answer pipe")
    if answers is None:
        return None
    try:
        asking = _open(directory / CLAIM_PIPE, os.O_WRONLY, "the claim pipe")
        if asking is None:
            return None
        try:
            os.write(asking, f"{language}\n".encode())  # a few bytes: never a full pipe
        finally:
            os.close(asking)
        return _status(_answer(answers, timeout_s))
    finally:
        os.close(answers)


def _open(path: Path, flags: int, what: str) -> int | None:
    """``path`` opened without blocking; None where nothing listens; StartFailed otherwise."""
    try:
        return os.open(path, flags | os.O_NONBLOCK)
    except OSError as error:
        if error.errno in NOT_LISTENING:
            return None
        raise StartFailed(f"{what} cannot be opened: {error}") from error


def _answer(answers: int, timeout_s: float) -> bytes:
    """The desktop's answer: its bytes until it closes the pipe (or ANSWER_MAX_BYTES)."""
    deadline = time.monotonic() + timeout_s
    received = b""
    while len(received) < ANSWER_MAX_BYTES:
        left = deadline - time.monotonic()
        if left <= 0:
            raise StartFailed(f"the warm desktop did not answer its claim within {timeout_s:.0f} s")
        readable, _, _ = select.select([answers], [], [], left)
        if not readable:
            continue
        with contextlib.suppress(BlockingIOError):  # woken with nothing yet
            chunk = os.read(answers, ANSWER_MAX_BYTES - len(received))
            if not chunk:
                # The writer closed. Before any writer came, Linux reports no end on a pipe
                # opened for reading; so this is the desktop's end of the answer.
                break
            received += chunk
    return received


def _status(answer: bytes) -> int:
    text = answer.decode(errors="replace").strip()
    if not text.isdigit():
        raise StartFailed(f"the warm desktop answered its claim with {text[:20]!r}, not a status")
    return int(text)
