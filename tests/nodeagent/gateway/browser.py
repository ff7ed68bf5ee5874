"""The browser's side of the gateway, for tests: open a path with an Origin and a ticket."""

from __future__ import annotations

import asyncio
import struct

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed
from websockets.typing import Origin

from tests.nodeagent.gateway.gateway_process import ORIGIN

WAIT_S = 20.0
SECURITY_NONE = 1


async def open_socket(url: str, origin: str = ORIGIN, **options: object) -> ClientConnection:
    return await connect(url, origin=Origin(origin), open_timeout=WAIT_S, **options)  # type: ignore[arg-type]


async def closed_with(browser: ClientConnection, within: float = WAIT_S) -> int | None:
    """Read until the gateway closes (within ``within`` seconds); its close code."""
    async with asyncio.timeout(within):
        try:
            while True:
                await browser.recv()
        except ConnectionClosed:
            pass
    return browser.close_code


async def refusal(url: str, first: str | bytes | None) -> int | None:
    """The close code the gateway answers ``first`` (a ticket; None: nothing) with."""
    async with await open_socket(url) as browser:
        if first is not None:
            await browser.send(first)
        return await closed_with(browser)


async def log_in_screen(browser: ClientConnection) -> tuple[int, int]:
    """The browser's part of the handshake (security type None), ClientInit, and the
    desktop's ServerInit: its framebuffer's width and height."""
    async with asyncio.timeout(WAIT_S):
        version = await browser.recv()
        assert version == b"RFB 003.008\n", version
        await browser.send(version)
        assert await browser.recv() == bytes([1, SECURITY_NONE])
        await browser.send(bytes([SECURITY_NONE]))
        assert await browser.recv() == b"\0\0\0\0"  # SecurityResult: OK
        await browser.send(b"\x01")  # ClientInit: shared
        server_init = b""
        while len(server_init) < 24:
            message = await browser.recv()
            assert isinstance(message, bytes)
            server_init += message
    width, height = struct.unpack(">HH", server_init[:4])
    return width, height


async def pointer_events(browser: ClientConnection, count: int) -> None:
    """``count`` PointerEvents (type 5), in one message."""
    await browser.send(b"".join(struct.pack(">BBHH", 5, 0, 10 + i, 20) for i in range(count)))
