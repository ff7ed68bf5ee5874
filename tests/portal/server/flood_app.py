"""A hostile ASGI application for the worker's flow-control test: on ``/flood/`` it sends
512 KiB messages as fast as its ``send`` returns and never receives; on ``/sink/`` it
accepts and never takes a message (``receive`` unawaited). Each counts what it did in a
file named by ``FLOOD_COUNT_FILE`` (bytes sent), so the test can see whether the worker held
it back. Served by ``python -m portal.server.daphne_worker tests.portal.server.flood_app:
application`` (and by plain daphne, which does not hold it back)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

MESSAGE = b"f" * (512 * 1024)


async def application(scope, receive, send) -> None:  # type: ignore[no-untyped-def]
    if scope["type"] == "lifespan":
        return
    if scope["type"] == "http":
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"up"})
        return
    assert (await receive())["type"] == "websocket.connect"
    await send({"type": "websocket.accept"})
    if scope["path"] == "/sink/":
        await asyncio.sleep(3600)  # takes nothing the browser sends
        return
    count = Path(os.environ["FLOOD_COUNT_FILE"])
    sent = 0
    while True:
        await send({"type": "websocket.send", "bytes": MESSAGE})
        sent += len(MESSAGE)
        count.write_text(str(sent))
