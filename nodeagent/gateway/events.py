"""The gateway's standard output: its listening line, then one event a line (messages.py)."""

from __future__ import annotations

import io
import logging

from pydantic import BaseModel

from nodeagent.gateway.messages import GatewayListening
from nodeagent.protocol_gateway import GatewayEvent

log = logging.getLogger(__name__)


class EventWriter:
    """Writes JSON lines to a file descriptor, unbuffered: each line is out when written.

    The writes block: an agent that stops reading holds the gateway back rather than making
    it buffer events without bound. Once the agent is gone (a broken pipe) lines are dropped.
    """

    def __init__(self, fd: int) -> None:
        # Raw, so that nothing stays buffered for the interpreter to flush into a dead pipe.
        self.stream: io.FileIO | None = io.FileIO(fd, "wb", closefd=False)

    def listening(self, port: int) -> None:
        """The first line: the port the gateway bound."""
        self._write(GatewayListening(listening=port))

    def emit(self, event: GatewayEvent) -> None:
        self._write(event)

    def _write(self, message: BaseModel) -> None:
        if self.stream is None:
            return
        data = memoryview(message.model_dump_json().encode() + b"\n")
        try:
            while data:
                written = self.stream.write(data)
                data = data[written or 0 :]
        except OSError as error:
            log.warning("the agent no longer reads the gateway's events (%s)", error)
            self.stream = None
