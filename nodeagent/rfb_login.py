"""The RFB (VNC) login, both parts: the one definition (issue 34, "one spine"). No Django.

- :func:`log_in_upstream`: the client's part against a desktop's websockify, with VNC
  authentication (security type 2: the 16-byte challenge DES-encrypted with the session's
  secret, :func:`nodeagent.readiness.vnc_auth_response`), up to a successful SecurityResult.
- :class:`BrowserHandshake`: the server's part towards a browser, offering security type
  None: the browser holds no secret, so it cannot try passwords.

The desktop gateway (:mod:`nodeagent.gateway.screen`) uses both; the readiness check
(:mod:`nodeagent.readiness`) reads the same banner and security types.
"""

from __future__ import annotations

import struct

from websockets.asyncio.connection import Connection

from nodeagent.readiness import (
    BANNER_LENGTH,
    CHALLENGE_LENGTH,
    SECURITY_NONE,
    SECURITY_VNC_AUTH,
    parse_banner,
    vnc_auth_response,
)

HANDSHAKE_MAX_BYTES = 64 * 1024  # what the desktop may send before its login is done
RFB_38 = b"RFB 003.008\n"  # the version the server's part sends first


class RfbError(Exception):
    """The other side broke the RFB handshake, or the desktop refused the login."""


class _Reader:
    """Exact-length reads over WebSocket messages (websockify splits and merges RFB data)."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        self.buffer = b""

    async def read(self, length: int) -> bytes:
        while len(self.buffer) < length:
            message = await self.connection.recv()
            self.buffer += message.encode("latin-1") if isinstance(message, str) else message
            if len(self.buffer) > HANDSHAKE_MAX_BYTES:
                raise RfbError(
                    f"the desktop sent over {HANDSHAKE_MAX_BYTES} bytes in its handshake"
                )
        data, self.buffer = self.buffer[:length], self.buffer[length:]
        return data


async def log_in_upstream(connection: Connection, password: str) -> bytes:
    """The client's part of the handshake with VNC authentication, up to a successful
    SecurityResult; returns what the desktop sent beyond it (normally nothing)."""
    reader = _Reader(connection)
    version = parse_banner(await reader.read(BANNER_LENGTH))
    if version is None or version < (3, 3):
        raise RfbError("the desktop sent no RFB banner")
    version = min(version, (3, 8))
    await connection.send(b"RFB %03d.%03d\n" % version)
    if version >= (3, 7):
        (count,) = await reader.read(1)
        if count == 0:
            raise RfbError(f"the desktop refused: {await _reason(reader)}")
        if SECURITY_VNC_AUTH not in await reader.read(count):
            raise RfbError("the desktop offers no VNC authentication")
        await connection.send(bytes([SECURITY_VNC_AUTH]))
    else:
        (chosen,) = struct.unpack(">I", await reader.read(4))
        if chosen != SECURITY_VNC_AUTH:
            raise RfbError(f"the desktop chose security type {chosen}")
    challenge = await reader.read(CHALLENGE_LENGTH)
    await connection.send(vnc_auth_response(password, challenge))
    (result,) = struct.unpack(">I", await reader.read(4))
    if result != 0:
        reason = await _reason(reader) if version >= (3, 8) else ""
        raise RfbError(f"the desktop refused the session's secret {reason}".strip())
    return reader.buffer


async def _reason(reader: _Reader) -> str:
    (length,) = struct.unpack(">I", await reader.read(4))
    return (await reader.read(min(length, 1024))).decode(errors="replace")


class BrowserHandshake:
    """The server's part of the handshake with the browser: our version (3.8) was sent on
    accept; the browser's version comes back, we offer security type None, it picks it.
    :meth:`feed` returns (bytes for the browser, bytes for the desktop)."""

    def __init__(self) -> None:
        self.buffer = b""
        self.version: tuple[int, int] | None = None
        self.done = False

    def feed(self, data: bytes) -> tuple[bytes, bytes]:
        self.buffer += data
        reply = b""
        if self.version is None:
            if len(self.buffer) < BANNER_LENGTH:
                return b"", b""
            version = parse_banner(self.buffer[:BANNER_LENGTH])
            if version is None or version < (3, 3):
                raise RfbError("the browser sent no RFB version")
            self.version = min(version, (3, 8))
            self.buffer = self.buffer[BANNER_LENGTH:]
            if self.version < (3, 7):  # 3.3: the server names the type, no result for None
                self.done = True
                return self._rest(struct.pack(">I", SECURITY_NONE))
            reply = bytes([1, SECURITY_NONE])
        if not self.buffer:
            return reply, b""
        if self.buffer[0] != SECURITY_NONE:
            raise RfbError(f"the browser chose security type {self.buffer[0]}")
        self.buffer = self.buffer[1:]
        self.done = True
        # 3.8 sends a SecurityResult for None too; 3.7 does not.
        return self._rest(reply + (b"\0\0\0\0" if self.version >= (3, 8) else b""))

    def _rest(self, reply: bytes) -> tuple[bytes, bytes]:
        rest, self.buffer = self.buffer, b""
        return reply, rest
