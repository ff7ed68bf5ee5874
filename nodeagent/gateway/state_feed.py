"""The agent's state lines on the gateway's standard input: split, bounded and parsed."""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Callable

from pydantic import ValidationError

from nodeagent.gateway.messages import STATE_LINE_MAX_BYTES, GatewayState

log = logging.getLogger(__name__)

READ_BYTES = 64 * 1024  # read this much of stdin at a time


class LineSplitter:
    """Splits a byte stream into lines of at most ``limit`` bytes; a longer line is dropped
    whole (with a log line), so the buffer never holds more than ``limit`` bytes."""

    def __init__(self, limit: int = STATE_LINE_MAX_BYTES) -> None:
        self.limit = limit
        self.buffer = bytearray()
        self.dropping = False  # inside a line over the limit: drop up to its end

    def feed(self, data: bytes) -> list[bytes]:
        """The lines that ``data`` completed."""
        lines: list[bytes] = []
        while data:
            end = data.find(b"\n")
            part, data = (data, b"") if end < 0 else (data[:end], data[end + 1 :])
            if not self.dropping:
                self.buffer += part
                if len(self.buffer) > self.limit:
                    log.warning("a state line over %d bytes: dropped", self.limit)
                    self.dropping = True
                    self.buffer.clear()
            if end >= 0:
                if not self.dropping:
                    lines.append(bytes(self.buffer))
                self.buffer.clear()
                self.dropping = False
        return lines


def parse_state(line: bytes) -> GatewayState | None:
    """The state a line holds; None (and a log line that quotes none of it) if malformed."""
    if not line.strip():
        return None
    try:
        return GatewayState.model_validate_json(line)
    except ValidationError as error:
        # The line holds the desktops' secrets: say where it is wrong, never what it holds.
        where = [".".join(map(str, e["loc"])) or e["type"] for e in error.errors()[:5]]
        log.warning("a malformed state line, ignored (%d errors: %s)", error.error_count(), where)
        return None


async def open_stdin() -> asyncio.StreamReader:
    """Standard input (a pipe from the agent) as an asyncio stream."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=READ_BYTES)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    return reader


async def follow_states(
    reader: asyncio.StreamReader, apply: Callable[[GatewayState], None]
) -> None:
    """Apply every well-formed state line until the stream ends (the agent is gone)."""
    splitter = LineSplitter()
    while data := await reader.read(READ_BYTES):
        for line in splitter.feed(data):
            if (state := parse_state(line)) is not None:
                apply(state)
    log.info("standard input ended: the agent is gone")
