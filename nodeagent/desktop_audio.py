"""A desktop's sound, as the node's gateway hears it: the protocol's one definition.

noVNC carries no sound. The desktop images (deskpool/desktop and the studios, labelled
:data:`LABEL_AUDIO`) run PulseAudio with one null sink, and ``deskpool-audio``
(``nodeagent/images/files/deskpool-audio``) serves that sink's monitor on container port
:data:`DESKTOP_AUDIO_PORT`, which the agent publishes beside websockify's on the node's
management address and reports as ``SessionReport.audio_port``.

The exchange, over plain TCP (docs/agent-protocol.md, "Desktop audio"):

1. the desktop sends its version's magic (:data:`MAGIC`, or an older image's
   :data:`MAGIC_PCM`) and a random :data:`CHALLENGE_LENGTH`-byte challenge;
2. the gateway answers :func:`audio_auth_response`: HMAC-SHA256 of the challenge, keyed with
   the session's secret as the desktop's password file holds it (its first 8 characters,
   as for VNC). The secret never crosses the wire, and an answer is good for one challenge;
3. the desktop sends ``OK`` and its format, then its sound for as long as the connection
   lasts, leaving out stretches of silence; or ``NO`` and closes. The format is
   :data:`FORMAT` (codec, rate, channels) after :data:`MAGIC`: the codec :data:`CODEC_OPUS`
   sends Opus packets of 20 ms, each after its length (:data:`PACKET_LENGTH`, at most
   :data:`MAX_PACKET_BYTES`; :func:`read_packet`), and :data:`CODEC_PCM` raw little-endian
   16-bit PCM in whole frames. After :data:`MAGIC_PCM` (images built before Opus) it is
   :data:`FORMAT_PCM` (rate, channels, bits), then PCM.

The agent and its gateway (:mod:`nodeagent.gateway.sound`) import this module; the image's
server speaks the same bytes without it (it holds no Python of the project).
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
MAGIC = b"DPAUDIO2"  # the format names its codec
MAGIC_PCM = b"DPAUDIO1"  # images built before Opus: always PCM
CHALLENGE_LENGTH = 16
ANSWER_LENGTH = 32
ACCEPTED, REFUSED = b"OK", b"NO"
FORMAT = struct.Struct(">BIB")  # codec, sample rate, channels
FORMAT_PCM = struct.Struct(">IBB")  # after MAGIC_PCM: sample rate, channels, bits per sample
CODEC_PCM, CODEC_OPUS = 1, 2
PCM_S16LE, OPUS = "s16le", "opus"  # the codecs' names, as the browser is told them
OPUS_FRAME_MS = 20  # what each packet holds
PACKET_LENGTH = struct.Struct(">H")  # before each Opus packet
# Opus's own bound for a packet of one 20 ms frame is 1,275 bytes; libopus's encoder is
# given 4,000 (its documentation's "recommended" output buffer). A longer one is refused.
MAX_PACKET_BYTES = 4000
_CONTEXT = b"deskpool-audio"


class AudioRefused(Exception):
    """The desktop broke the exchange, or refused the secret."""


@dataclass(frozen=True)
class AudioFormat:
    rate: int
    channels: int
    bits: int  # of a PCM sample (16); 0 for Opus
    codec: str = PCM_S16LE

    @property
    def frame_bytes(self) -> int:
        """Bytes of one PCM frame (all channels); 0 for Opus, sent in packets."""
        return self.channels * self.bits // 8

    def as_json(self) -> dict[str, object]:
        """The browser's first message: ``{"format": "opus" | "s16le", "rate", "channels"}``."""
        return {"format": self.codec, "rate": self.rate, "channels": self.channels}


def audio_auth_response(secret: str, challenge: bytes) -> bytes:
    """The gateway's answer to a desktop's audio challenge."""
    key = secret[:VNC_PASSWORD_LENGTH].encode("utf-8")
    return hmac.new(key, _CONTEXT + challenge, hashlib.sha256).digest()


def check_format(rate: int, channels: int, bits: int) -> AudioFormat:
    """The desktop's PCM format, if a browser can play it (8-96 kHz, 1-2 channels, 16 bits)."""
    if not 8000 <= rate <= 96000 or channels not in (1, 2) or bits != 16:
        raise AudioRefused(
            f"the desktop offers sound the player cannot play: {rate} Hz, "
            f"{channels} channels, {bits} bits"
        )
    return AudioFormat(rate, channels, bits)


def check_coded_format(codec: int, rate: int, channels: int) -> AudioFormat:
    """The format a :data:`MAGIC` desktop names: PCM as :func:`check_format`, or Opus at
    48 kHz (the rate Opus decoders give), 1-2 channels."""
    if codec == CODEC_PCM:
        return check_format(rate, channels, 16)
    if codec == CODEC_OPUS and rate == 48000 and channels in (1, 2):
        return AudioFormat(rate, channels, 0, OPUS)
    raise AudioRefused(
        f"the desktop offers sound the player cannot play: codec {codec}, {rate} Hz, "
        f"{channels} channels"
    )


async def read_packet(reader: asyncio.StreamReader) -> bytes:
    """The desktop's next Opus packet; b"" where its stream ended between two. Raises
    :class:`AudioRefused` for a length of 0 or over :data:`MAX_PACKET_BYTES` (nothing of it
    is read) and for a stream cut inside a packet."""
    try:
        head = await reader.readexactly(PACKET_LENGTH.size)
    except asyncio.IncompleteReadError as error:
        if not error.partial:
            return b""
        raise AudioRefused("the desktop's sound ended inside a packet's length") from error
    (length,) = PACKET_LENGTH.unpack(head)
    if not 0 < length <= MAX_PACKET_BYTES:
        raise AudioRefused(f"the desktop sent a packet of {length} bytes (1-{MAX_PACKET_BYTES})")
    try:
        return await reader.readexactly(length)
    except asyncio.IncompleteReadError as error:
        raise AudioRefused("the desktop's sound ended inside a packet") from error


async def open_audio(
    host: str, port: int, secret: str, timeout_s: float
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, AudioFormat]:
    """Connect to a desktop's sound and log in; the reader then gives its sound in the
    format returned (PCM, or Opus packets: :func:`read_packet`). Raises OSError,
    TimeoutError, or :class:`AudioRefused`."""

    async def exchange() -> tuple[asyncio.StreamReader, asyncio.StreamWriter, AudioFormat]:
        reader, writer = await asyncio.open_connection(host, port)
        try:
            hello = await reader.readexactly(len(MAGIC) + CHALLENGE_LENGTH)
            magic = hello[: len(MAGIC)]
            if magic not in (MAGIC, MAGIC_PCM):
                raise AudioRefused("the desktop's sound port does not speak Deskpool audio")
            writer.write(audio_auth_response(secret, hello[len(MAGIC) :]))
            await writer.drain()
            verdict = await reader.readexactly(len(ACCEPTED))
            if verdict != ACCEPTED:
                raise AudioRefused("the desktop refused the session's secret")
            if magic == MAGIC:
                found = check_coded_format(*FORMAT.unpack(await reader.readexactly(FORMAT.size)))
            else:
                found = check_format(*FORMAT_PCM.unpack(await reader.readexactly(FORMAT_PCM.size)))
        except asyncio.IncompleteReadError as error:
            writer.close()
            raise AudioRefused("the desktop closed its sound port during the exchange") from error
        except BaseException:
            writer.close()
            raise
        return reader, writer, found

    return await asyncio.wait_for(exchange(), timeout_s)
