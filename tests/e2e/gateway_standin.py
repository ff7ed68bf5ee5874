"""A small real server on 127.0.0.1 for the browser tests of the desktop's sockets: it serves a
page and ``static/``, and stands in for a node's gateway on ``/gw/<name>``, where the test
says what each socket does (``behaviours``: an async function of the connection, which reads
the ticket itself). Every socket's path and first message are recorded.

(Playwright's ``route_web_socket`` stand-in is not a channel noVNC accepts, and it cannot
send in the same instant as the ticket arrives; this is the websockets library's server.)
"""

from __future__ import annotations

import asyncio
import mimetypes
import struct
import threading
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from websockets.asyncio.server import ServerConnection, serve
from websockets.datastructures import Headers
from websockets.http11 import Request, Response

from tests.integration.stack import ROOT

Behaviour = Callable[[ServerConnection], Awaitable[None]]


@dataclass
class Standin:
    origin: str
    sockets: list[str] = field(default_factory=list)  # the paths, in the order opened
    first_messages: list[str | bytes] = field(default_factory=list)

    def gateway_url(self, name: str) -> str:
        return self.origin.replace("http://", "ws://") + f"/gw/{name}"


def static_file(path: str) -> tuple[bytes, str] | None:
    file = (ROOT / path.lstrip("/")).resolve()
    if not file.is_file() or ROOT / "static" not in file.parents:
        return None
    kind = "text/javascript" if file.suffix == ".js" else mimetypes.guess_type(file.name)[0]
    return file.read_bytes(), kind or "application/octet-stream"


@contextmanager
def gateway_standing_in(
    pages: dict[str, str], behaviours: dict[str, Behaviour]
) -> Iterator[Standin]:
    """Serve ``pages`` (path -> HTML), ``/static/…``, and the sockets ``/gw/<name>``."""
    standin = Standin(origin="")

    async def gateway(connection: ServerConnection) -> None:
        path = connection.request.path if connection.request else ""
        standin.sockets.append(path)
        behaviour = behaviours.get(path.removeprefix("/gw/").split("?", 1)[0])
        if behaviour is None:
            await connection.close(code=4404, reason="no such stand-in")
            return
        await behaviour(connection)

    def http(connection: ServerConnection, request: Request) -> Response | None:
        if request.path.startswith(("/gw/", "/ws/")):
            return None  # the WebSocket handshake goes on
        path = request.path.split("?", 1)[0]
        found = (pages[path].encode(), "text/html; charset=utf-8") if path in pages else None
        found = found or (static_file(path) if path.startswith("/static/") else None)
        if found is None:
            return connection.respond(404, "not here\n")
        body, kind = found
        headers = Headers([("Content-Type", kind), ("Content-Length", str(len(body)))])
        return Response(200, "OK", headers, body)

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    async def start():  # the server is made inside its loop
        return await serve(gateway, "127.0.0.1", 0, process_request=http)

    server = asyncio.run_coroutine_threadsafe(start(), loop).result(timeout=10)
    try:
        port = next(iter(server.sockets)).getsockname()[1]
        standin.origin = f"http://127.0.0.1:{port}"
        yield standin
    finally:
        server.close()
        asyncio.run_coroutine_threadsafe(server.wait_closed(), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)


def keeping_first(standin: Standin, behaviour: Behaviour) -> Behaviour:
    """``behaviour``, after reading the socket's first message (the ticket) into the record."""

    async def run(connection: ServerConnection) -> None:
        standin.first_messages.append(await connection.recv())
        await behaviour(connection)

    return run


def closing_with(code: int) -> Behaviour:
    async def close(connection: ServerConnection) -> None:
        await connection.close(code=code, reason="closed by the test")

    return close


async def rfb_server_none(
    connection: ServerConnection, name: bytes = b"standin", record: bytearray | None = None
) -> None:
    """Play an RFB 3.8 server with security type None, as the gateway does once the ticket is
    good, up to ServerInit; then keep the socket open until the browser closes it, adding
    what the browser sends from then on (its key events among it) to ``record``."""
    received = bytearray()

    async def read(size: int) -> bytes:
        """``size`` bytes of the browser's RFB stream, however noVNC cut it into messages."""
        while len(received) < size:
            message = await connection.recv()
            received.extend(message if isinstance(message, bytes) else message.encode())
        taken = bytes(received[:size])
        del received[:size]
        return taken

    await connection.send(b"RFB 003.008\n")
    await read(12)  # the client's version
    await connection.send(bytes([1, 1]))  # one security type: None
    await read(1)
    await connection.send(struct.pack(">I", 0))  # SecurityResult: OK
    await read(1)  # ClientInit
    pixel_format = struct.pack(">BBBBHHHBBB3x", 32, 24, 0, 1, 255, 255, 255, 16, 8, 0)
    size = struct.pack(">HH", 64, 48)
    await connection.send(size + pixel_format + struct.pack(">I", len(name)) + name)
    async for message in connection:  # what noVNC sends (SetEncodings, updates asked, keys)
        if record is not None:
            record.extend(message if isinstance(message, bytes) else message.encode())
