"""A desktop's sound, as the portal's audio relay hears it: the protocol's one definition.

noVNC carries no sound. The desktop images (deskpool/desktop and the studios, labelled
:data:`LABEL_AUDIO`) run PulseAudio with one null sink, and ``deskpool-audio``
(``nodeagent/images/files/deskpool-audio``) serves that sink's monitor on container port
:data:`DESKTOP_AUDIO_PORT`, which the agent publishes beside websockify's on the node's
management address and reports as ``SessionReport.audio_port``.

The exchange, over plain TCP (docs/agent-protocol.md, "Desktop audio"):

1. the desktop sends :data:`MAGIC` and a random :data:`CHALLENGE_LENGTH`-byte challenge;
2. the portal answers :func:`audio_auth_response`: HMAC-SHA256 of the challenge, keyed with
   the session's secret as the desktop's password file holds it (its first 8 characters,
   as for VNC). The secret never crosses the wire, and an answer is good for one challenge;
3. the desktop sends ``OK`` and :class:`AudioFormat` (rate, channels, bits), then raw
   little-endian PCM in whole frames for as long as the connection lasts, leaving out
   stretches of silence; or ``NO`` and closes.

The portal and the agent import this module; the image's server speaks the same bytes
without it (it holds no Python of the project).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import struct
from dataclasses import dataclass

from nodeagent.readiness import VNC_PASSWORD_LENGTH  # what the password file keeps

DESKTOP_AUDIO_PORT = 6081
LABEL_AUDIO = "deskpool.audio"  # on images that serve sound; its value is the format's name
MAGIC = b"DPAUDIO1"
CHALLENGE_LENGTH = 16
ANSWER_LENGTH = 32
ACCEPTED, REFUSED = b"OK", b"NO"
FORMAT = struct.Struct(">IBB")  # sample rate, channels, bits per sample
_CONTEXT = b"deskpool-audio"


class AudioRefused(Exception):
    """The desktop broke the exchange, or refused the secret."""


@dataclass(frozen=True)
class AudioFormat:
    rate: int
    channels: int
    bits: int

    @property
    def frame_bytes(self) -> int:
        return self.channels * self.bits // 8

    def as_json(self) -> dict[str, object]:
        return {"rate": self.rate, "channels": self.channels, "format": f"s{self.bits}le"}


def audio_auth_response(secret: str, challenge: bytes) -> bytes:
    """The portal's answer to a desktop's audio challenge."""
    key = secret[:VNC_PASSWORD_LENGTH].encode("utf-8")
    return hmac.new(key, _CONTEXT + challenge, hashlib.sha256).digest()


def check_format(rate: int, channels: int, bits: int) -> AudioFormat:
    """The desktop's format, if a browser can play it (8-96 kHz, 1-2 channels, 16 bits)."""
    if not 8000 <= rate <= 96000 or channels not in (1, 2) or bits != 16:
        raise AudioRefused(
            f"the desktop offers sound the player cannot play: {rate} Hz, "
            f"{channels} channels, {bits} bits"
        )
    return AudioFormat(rate, channels, bits)


async def open_audio(
    host: str, port: int, secret: str, timeout_s: float
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, AudioFormat]:
    """Connect to a desktop's sound and log in; the reader then gives its PCM. Raises
    OSError, TimeoutError, or :class:`AudioRefused`."""

    async def exchange() -> tuple[asyncio.StreamReader, asyncio.StreamWriter, AudioFormat]:
        reader, writer = await asyncio.open_connection(host, port)
        try:
            hello = await reader.readexactly(len(MAGIC) + CHALLENGE_LENGTH)
            if not hello.startswith(MAGIC):
                raise AudioRefused("the desktop's sound port does not speak Deskpool audio")
            writer.write(audio_auth_response(secret, hello[len(MAGIC) :]))
            await writer.drain()
            verdict = await reader.readexactly(len(ACCEPTED))
            if verdict != ACCEPTED:
                raise AudioRefused("the desktop refused the session's secret")
            found = check_format(*FORMAT.unpack(await reader.readexactly(FORMAT.size)))
        except asyncio.IncompleteReadError as error:
            writer.close()
            raise AudioRefused("the desktop closed its sound port during the exchange") from error
        except BaseException:
            writer.close()
            raise
        return reader, writer, found

    return await asyncio.wait_for(exchange(), timeout_s)
