"""The sound: the desktop's deskpool-audio to the browser, logged in by the gateway.

The gateway logs in with the session's secret (:func:`nodeagent.desktop_audio.open_audio`),
sends the format as one text frame (``{"format": "opus" | "s16le", "rate", "channels"}``),
then the sound in binary frames: each Opus packet in a frame of its own (at most
:data:`~nodeagent.desktop_audio.MAX_PACKET_BYTES`; a longer one closes the socket with
4413), or, from an image that serves PCM, the PCM in frames of at most
:data:`AUDIO_CHUNK_BYTES`. It reads the next packet or chunk of the desktop's stream only
once the browser took the one before (``send`` drains): a browser that stops reading stops
the desktop. What the browser sends after its ticket is read (so that its close is seen)
and dropped.
"""

from __future__ import annotations

import json
import logging

from websockets.exceptions import ConnectionClosed

from nodeagent.desktop_audio import OPUS, AudioRefused, open_audio, read_packet
from nodeagent.gateway.carrying import UPSTREAM_TIMEOUT_S, first_of
from nodeagent.gateway.codes import CLOSE_NO_SOUND, CLOSE_TOO_BIG, CLOSE_UNREACHABLE
from nodeagent.gateway.links import CLOSE_NORMAL, Link, LinkEnded
from nodeagent.gateway.screen import browser_ended, to_browser

log = logging.getLogger(__name__)

AUDIO_CHUNK_BYTES = 16384  # at most this much PCM per frame, and in memory at once


async def carry_sound(link: Link) -> None:
    """Log in to the desktop's sound, send the format, then the PCM until a side ends."""
    session = link.session
    if session.audio_port is None:
        raise LinkEnded(CLOSE_NO_SOUND, "this desktop has no sound")
    try:
        reader, writer, found = await open_audio(
            session.host, session.audio_port, session.password, UPSTREAM_TIMEOUT_S
        )
    except (OSError, TimeoutError, AudioRefused) as error:
        log.warning("session %s: no sound: %s", session.session_id, error)
        raise LinkEnded(CLOSE_UNREACHABLE, "the desktop's sound does not answer") from error

    async def close_sound() -> None:
        writer.close()  # nothing was written since the login: nothing to wait for

    link.hold(close_sound)
    link.report_opened()
    await to_browser_text(link, json.dumps(found.as_json()))

    async def pcm_to_browser() -> None:
        try:
            while chunk := await reader.read(AUDIO_CHUNK_BYTES):
                await to_browser(link, chunk)
        except OSError as error:
            raise LinkEnded(CLOSE_NORMAL, "the desktop's sound broke off") from error
        raise LinkEnded(CLOSE_NORMAL, "the desktop's sound ended")

    async def opus_to_browser() -> None:
        try:
            while packet := await read_packet(reader):
                await to_browser(link, packet)
        except OSError as error:
            raise LinkEnded(CLOSE_NORMAL, "the desktop's sound broke off") from error
        except AudioRefused as error:
            raise LinkEnded(CLOSE_TOO_BIG, str(error)) from error
        raise LinkEnded(CLOSE_NORMAL, "the desktop's sound ended")

    sound = opus_to_browser() if found.codec == OPUS else pcm_to_browser()
    await first_of(sound, drop_browser_input(link))


async def to_browser_text(link: Link, text: str) -> None:
    try:
        await link.browser.send(text)
    except ConnectionClosed as closed:
        raise browser_ended(closed) from closed
    link.bytes_out += len(text)


async def drop_browser_input(link: Link) -> None:
    """Read the browser (bounded, as everywhere) and drop it, until it closes."""
    while True:
        try:
            message = await link.browser.recv()
        except ConnectionClosed as closed:
            raise browser_ended(closed) from closed
        link.bytes_in += len(message)
