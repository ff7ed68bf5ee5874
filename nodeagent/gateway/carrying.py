"""What the screen and the sound share: limits and running pumps side by side."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

MESSAGE_MAX_BYTES = 1024 * 1024  # one WebSocket message, either way
QUEUE_MESSAGES = 4  # messages received and not yet taken, per connection: then it stops reading
UPSTREAM_TIMEOUT_S = 5.0  # connect and log in to the desktop within this
CLOSE_TIMEOUT_S = 2.0  # wait this long for the other side's close frame


async def first_of(*coroutines: Coroutine[Any, Any, None]) -> None:
    """Run the coroutines together until one ends; stop the others; raise what it raised."""
    tasks = [asyncio.create_task(coroutine) for coroutine in coroutines]
    try:
        done, _pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    for task in done:
        task.result()
