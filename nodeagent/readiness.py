"""Is a desktop ready? A VNC (RFB) handshake through its websockify port answers that.

We open ``ws://host:port/websockify``, read the server's ``RFB 003.00x`` banner, answer
with the same version, read the security types and close. That proves websockify,
Xvnc and the password file wiring all work, without logging in. The desktop images
start Xvnc with ``-UseBlacklist=0``: websockify makes every client 127.0.0.1 and these
deliberately unfinished handshakes must not get that address blacklisted.

:func:`vnc_auth_response` is the one VNC authentication (DES) answer: the node's gateway
logs in with it (:mod:`nodeagent.rfb_login`), and the image check uses it.
"""

from __future__ import annotations

import re
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from cryptography.hazmat.decrepit.ciphers.algorithms import TripleDES
from cryptography.hazmat.primitives.ciphers import Cipher, modes
from websockets.exceptions import WebSocketException
from websockets.sync.client import ClientConnection, connect
from websockets.typing import Subprotocol

T = TypeVar("T")

_BANNER = re.compile(rb"^RFB (\d{3})\.(\d{3})\n$")
BANNER_LENGTH = 12
SECURITY_NONE = 1
SECURITY_VNC_AUTH = 2
CHALLENGE_LENGTH = 16
VNC_PASSWORD_LENGTH = 8  # VNC uses the first 8 bytes of a password


def vnc_auth_response(password: str, challenge: bytes) -> bytes:
    """The answer to a VNC authentication challenge (RFB security type 2): the 16 bytes
    DES-encrypted with the password as key (its first 8 bytes, NUL-padded, each byte's bits
    reversed, as VNC does). TripleDES with the same key three times is plain DES."""
    key = password.encode("latin-1")[:VNC_PASSWORD_LENGTH].ljust(VNC_PASSWORD_LENGTH, b"\0")
    key = bytes(int(f"{b:08b}"[::-1], 2) for b in key)
    encryptor = Cipher(TripleDES(key * 3), modes.ECB()).encryptor()
    return encryptor.update(challenge) + encryptor.finalize()


def parse_banner(banner: bytes) -> tuple[int, int] | None:
    """``RFB 003.008\\n`` -> (3, 8); None for anything else."""
    match = _BANNER.match(banner)
    return None if match is None else (int(match.group(1)), int(match.group(2)))


class DesktopNotReady(RuntimeError):
    """No working VNC handshake before the deadline; the message says what was seen last."""


@dataclass(frozen=True)
class Handshake:
    """What the VNC server offered."""

    version: str  # "003.008"
    security_types: list[int]


def vnc_handshake(host: str, port: int, timeout_s: float = 3.0) -> Handshake:
    """One handshake attempt; raises ``OSError``/``WebSocketException``/``DesktopNotReady``."""
    url = f"ws://{host}:{port}/websockify"
    subprotocols = [Subprotocol("binary")]
    with connect(
        url, subprotocols=subprotocols, open_timeout=timeout_s, close_timeout=1
    ) as connection:
        reader = _Reader(connection, timeout_s)
        banner = reader.read(BANNER_LENGTH)
        parsed = parse_banner(banner)
        if parsed is None:
            raise DesktopNotReady(f"not an RFB banner: {banner!r}")
        connection.send(banner)
        major, minor = parsed
        version = f"{major:03d}.{minor:03d}"
        if (major, minor) < (3, 7):
            # RFB 3.3: the server picks the type, a 4-byte big-endian number.
            (chosen,) = struct.unpack(">I", reader.read(4))
            return Handshake(version=version, security_types=[chosen] if chosen else [])
        (count,) = reader.read(1)
        if count == 0:
            (length,) = struct.unpack(">I", reader.read(4))
            reason = reader.read(length).decode(errors="replace")
            raise DesktopNotReady(f"VNC server refused the connection: {reason}")
        return Handshake(version=version, security_types=list(reader.read(count)))


def wait_for_desktop(
    host: str,
    port: int,
    timeout_s: float,
    *,
    interval_s: float = 0.2,
    abort_reason: Callable[[], str | None] | None = None,
) -> Handshake:
    """Retry :func:`vnc_handshake` until it works or ``timeout_s`` passes.

    ``abort_reason`` is asked between attempts (e.g. "did the container exit?"); when it
    returns a reason we give up at once with that reason.
    """
    return keep_trying(
        lambda attempt_s: vnc_handshake(host, port, timeout_s=attempt_s),
        f"no VNC handshake on {host}:{port}",
        timeout_s,
        retry_on=(OSError, WebSocketException, TimeoutError, DesktopNotReady),
        interval_s=interval_s,
        abort_reason=abort_reason,
    )


def keep_trying(
    attempt: Callable[[float], T],
    failure: str,
    timeout_s: float,
    *,
    retry_on: tuple[type[BaseException], ...],
    interval_s: float = 0.2,
    abort_reason: Callable[[], str | None] | None = None,
) -> T:
    """``attempt(seconds it may take)`` again while it raises one of ``retry_on``, until it
    works or ``timeout_s`` passes (then DesktopNotReady, ``failure`` and the last error);
    ``abort_reason`` is asked between attempts and ends the wait with its reason."""
    deadline = time.monotonic() + timeout_s
    last_error = "no attempt made"
    while True:
        try:
            return attempt(max(0.5, min(3.0, deadline - time.monotonic())))
        except retry_on as error:
            last_error = f"{type(error).__name__}: {error}"
        if abort_reason is not None and (reason := abort_reason()):
            raise DesktopNotReady(reason)
        if time.monotonic() + interval_s >= deadline:
            raise DesktopNotReady(f"{failure} within {timeout_s:.0f} s ({last_error})")
        time.sleep(interval_s)


class _Reader:
    """Exact-length reads over WebSocket messages (websockify may split or merge RFB data)."""

    def __init__(self, connection: ClientConnection, timeout_s: float) -> None:
        self._connection = connection
        self._timeout_s = timeout_s
        self._buffer = b""

    def read(self, length: int) -> bytes:
        while len(self._buffer) < length:
            message = self._connection.recv(timeout=self._timeout_s)
            self._buffer += message.encode() if isinstance(message, str) else message
        data, self._buffer = self._buffer[:length], self._buffer[length:]
        return data
