"""The portal's ASGI worker: daphne, with flow control on its WebSockets both ways.

``python -m portal.server.daphne_worker`` takes daphne's own arguments (``-b``, ``-p``,
``--fd``, ``--access-log``, the application) and runs daphne's server with two changes that
the ASGI interface cannot express (it has no "drain" and no "stop reading"):

- **To the browser:** an application's ``send`` of a ``websocket.send`` returns only once
  the connection's transport holds less than Twisted's ``bufferSize`` (64 KiB) unsent. An
  application that sends as fast as ``send`` returns (the live updates, the live class)
  therefore waits while the browser does not read: what waits in this process is one
  message and the transport's buffer, not everything the application sent.
  The wait is Twisted's own push-producer protocol: :class:`SendWindow` is registered as the
  transport's producer and is paused while its buffer is full.
- **From the browser:** a WebSocket's messages wait for the application in a
  :class:`BoundedInbox`; while it holds :data:`INBOX_MESSAGES` messages or
  :data:`INBOX_BYTES` bytes, daphne stops reading the socket, and the browser's TCP
  window closes, until the application has taken them.

Plain HTTP is daphne's, unchanged. Without this worker (plain ``daphne``) the portal still
runs, but a socket whose application sends to a browser that stopped reading grows the
process (docs/security.md, "The gateway and the ASGI worker hold bounded memory"; issue 34,
item 0). A desktop's screen and sound do not pass here: they go through the node's gateway.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from daphne.cli import CommandLineInterface
from daphne.server import Server
from daphne.ws_protocol import WebSocketProtocol

log = logging.getLogger(__name__)

__all__ = ["BoundedInbox", "FlowControlledServer", "SendWindow", "main"]

INBOX_MESSAGES = 32  # a WebSocket's messages waiting for the application, at most (then pause)
INBOX_BYTES = 2 * 1024 * 1024  # their bytes, at most (then pause); one message may pass it


class SendWindow:
    """Twisted's push producer on a WebSocket's transport: the transport pauses it while more
    than its ``bufferSize`` waits to be sent and resumes it once all is sent; ``wait`` returns
    while it is not paused. A lost connection stops it, which ends every wait."""

    def __init__(self) -> None:
        self.open = asyncio.Event()
        self.open.set()

    def pauseProducing(self) -> None:  # noqa: N802 (Twisted's interface)
        self.open.clear()

    def resumeProducing(self) -> None:  # noqa: N802
        self.open.set()

    def stopProducing(self) -> None:  # noqa: N802
        self.open.set()

    async def wait(self) -> None:
        await self.open.wait()


def message_size(message: dict[str, Any]) -> int:
    return len(message.get("bytes") or message.get("text") or "")


class BoundedInbox(asyncio.Queue):
    """A WebSocket's messages for the application; reading the socket pauses while it is full.

    daphne calls ``put_nowait`` for each message it reads; ``asyncio.Queue.get`` (the
    application's ``receive``) takes them through ``get_nowait``."""

    def __init__(self, protocol: WebSocketProtocol) -> None:
        super().__init__()
        self.protocol = protocol
        self.bytes = 0
        self.reading_paused = False

    def put_nowait(self, item: dict[str, Any]) -> None:
        super().put_nowait(item)
        self.bytes += message_size(item)
        if not self.reading_paused and self._full():
            transport = self.protocol.transport
            if transport is not None:
                self.reading_paused = True
                transport.pauseProducing()

    def get_nowait(self) -> dict[str, Any]:
        item = super().get_nowait()
        self.bytes -= message_size(item)
        if self.reading_paused and not self._full():
            self.reading_paused = False
            transport = self.protocol.transport
            if transport is not None and getattr(transport, "connected", True):
                transport.resumeProducing()
        return item

    def _full(self) -> bool:
        return self.qsize() >= INBOX_MESSAGES or self.bytes >= INBOX_BYTES


class FlowControlledServer(Server):
    """daphne's server with :class:`SendWindow` and :class:`BoundedInbox` on every WebSocket
    (the module's docstring)."""

    def create_application(self, protocol: Any, scope: dict) -> asyncio.Queue | None:
        if not isinstance(protocol, WebSocketProtocol):
            return super().create_application(protocol, scope)
        # daphne's create_application, with the bounded inbox in place of its Queue.
        assert "application_instance" not in self.connections[protocol]
        inbox = BoundedInbox(protocol)
        scope.setdefault("asgi", {"version": "3.0"})
        instance = self.application(scope=scope, receive=inbox.get, send=self._sender(protocol))
        if protocol not in self.connections:
            return None
        self.connections[protocol]["application_instance"] = asyncio.ensure_future(instance)
        return inbox

    def _sender(self, protocol: WebSocketProtocol) -> Any:
        window = SendWindow()

        async def send(message: dict[str, Any]) -> None:
            if message.get("type") == "websocket.accept":
                await self.handle_reply(protocol, message)
                take_send_window(protocol, window)
                return
            await self.handle_reply(protocol, message)
            if message.get("type") == "websocket.send":
                await window.wait()

        return send


def take_send_window(protocol: WebSocketProtocol, window: SendWindow) -> None:
    """Make ``window`` the producer of the accepted socket's transport (in place of the HTTP
    channel it was upgraded from, which no longer sends anything on it)."""
    transport = protocol.transport
    if transport is None or not getattr(transport, "connected", True):
        return
    if getattr(transport, "producer", None) is not None:
        transport.unregisterProducer()
    transport.registerProducer(window, True)


class FlowControlledCommandLine(CommandLineInterface):
    """daphne's command line, serving with :class:`FlowControlledServer`."""

    server_class = FlowControlledServer


def main() -> None:
    FlowControlledCommandLine.entrypoint()


if __name__ == "__main__":
    main()
