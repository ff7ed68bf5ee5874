"""Sends to the channel layer from sync code, cheaply and in order.

``async_to_sync(layer.group_send)`` makes a new event loop, and with it a new Redis
connection, for every message: about 50 ms each, five per session change, so a scheduling
cycle placing 40 sessions spent most of its time there. Here one background thread per
process runs one event loop and sends every queued message in the order it was queued,
over the layer's own connection; the caller does not wait. (With the pub/sub layer a send is
one PUBLISH, and the layer sends one at a time per event loop anyway.)
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
import threading
from typing import Any

from channels.layers import get_channel_layer

log = logging.getLogger(__name__)


class LayerSender:
    def __init__(self) -> None:
        self.pid = os.getpid()
        self.loop = asyncio.new_event_loop()
        self.queue: asyncio.Queue[tuple[str, dict[str, Any]]] | None = None
        self.started = threading.Event()
        self.lock = threading.Lock()
        self.pending = 0
        self.idle = threading.Event()
        self.idle.set()
        self.thread = threading.Thread(target=self._run, name="layer-sender", daemon=True)
        self.thread.start()
        self.started.wait()

    def submit(self, group: str, message: dict[str, Any]) -> None:
        with self.lock:
            self.pending += 1
            self.idle.clear()
        assert self.queue is not None
        self.loop.call_soon_threadsafe(self.queue.put_nowait, (group, message))

    def flush(self, timeout: float) -> bool:
        """Wait until everything queued so far was sent (True) or ``timeout`` passed."""
        return self.idle.wait(timeout)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.queue = asyncio.Queue()
        self.loop.call_soon(self.started.set)
        self.loop.run_until_complete(self._drain())

    async def _drain(self) -> None:
        assert self.queue is not None
        layer = get_channel_layer()
        while True:
            group, message = await self.queue.get()
            try:
                if layer is not None:
                    await layer.group_send(group, message)
            except Exception:  # a page missing one update refreshes on the next
                log.exception("could not send %s to %s", message.get("type"), group)
            finally:
                with self.lock:
                    self.pending -= 1
                    if self.pending == 0:
                        self.idle.set()


_sender: LayerSender | None = None
_sender_lock = threading.Lock()


def sender() -> LayerSender:
    """This process's sender (a new one in a forked child: threads do not survive a fork)."""
    global _sender
    with _sender_lock:
        if _sender is None or _sender.pid != os.getpid():
            _sender = LayerSender()
        return _sender


@atexit.register
def _flush_at_exit() -> None:
    if _sender is not None and _sender.pid == os.getpid():
        _sender.flush(timeout=2.0)
