"""The sound through the real gateway process: a real deskpool/desktop's Opus, one packet a
frame, that decodes to the tone the desktop played; an image from before Opus (PCM) still
heard; and a desktop that announces a packet over the bound closed with 4413."""

from __future__ import annotations

import asyncio
import json
import struct
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager

import pytest
from websockets.exceptions import ConnectionClosed

from bench.desktop_audio import TONE_AMPLITUDE, decode_opus, play_tone
from nodeagent.desktop_audio import (
    CODEC_OPUS,
    FORMAT,
    FORMAT_PCM,
    MAGIC,
    MAGIC_PCM,
    MAX_PACKET_BYTES,
    PACKET_LENGTH,
)
from nodeagent.gateway.codes import CLOSE_TOO_BIG
from nodeagent.runtime.base import ManagedContainer
from nodeagent.runtime.docker_runtime import DockerRuntime
from tests.nodeagent.conftest import wait_for_image
from tests.nodeagent.gateway.browser import open_socket
from tests.nodeagent.gateway.gateway_process import GatewayProcess, session, state_for, ticket_for
from tests.nodeagent.gateway.test_gateway_process import wait_until_applied
from tests.nodeagent.test_desktop_audio import peak, steady, tone_frequency

SESSION_ID = 4311
PASSWORD = "sound123"


async def listen(gateway: GatewayProcess, key: bytes, seconds: float, during=None):  # type: ignore[no-untyped-def]
    """The format frame and the binary frames a browser gets in ``seconds``."""
    frames: list[bytes] = []
    async with await open_socket(gateway.url + "/sound") as browser:
        await browser.send(ticket_for(key, SESSION_ID, "sound")[0])
        announced = json.loads(await browser.recv())
        if during is not None:
            await asyncio.to_thread(during)
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            try:
                frame = await asyncio.wait_for(browser.recv(), left)
            except (TimeoutError, ConnectionClosed):
                break
            assert isinstance(frame, bytes)
            frames.append(frame)
    return announced, frames


@pytest.fixture
def sounding_desktop(  # type: ignore[no-untyped-def]
    docker_client, node_name, sessions_dir, make_session
) -> Iterator[ManagedContainer]:
    image = wait_for_image(docker_client, "deskpool/desktop:latest", "desktop")
    runtime = DockerRuntime(
        docker_client, node_name=node_name, sessions_dir=sessions_dir, ready_timeout_s=60
    )
    started = runtime.start(
        make_session(SESSION_ID, image=image, vnc_password=PASSWORD, memory_mb=1024)
    )
    yield started
    runtime.stop(SESSION_ID)


@pytest.mark.docker
def test_a_desktops_opus_comes_one_packet_a_frame_and_decodes_to_its_tone(
    gateway, ticket_key, sounding_desktop, docker_client
) -> None:
    key, key_bytes = ticket_key
    desktop = sounding_desktop
    assert desktop.port is not None and desktop.audio_port is not None
    gateway.send_state(
        state_for(
            key,
            session(SESSION_ID, desktop.port, password=PASSWORD, audio_port=desktop.audio_port),
        )
    )
    wait_until_applied(gateway)
    container = docker_client.containers.get(desktop.container_id)

    announced, frames = asyncio.run(
        listen(gateway, key_bytes, 4, during=lambda: play_tone(container, 2))
    )
    assert announced == {"format": "opus", "rate": 48000, "channels": 2}
    # 20 ms a packet: the tone's 2 s are about 100 of them, each well under the bound.
    assert 90 <= len(frames) <= 110, len(frames)
    assert max(len(frame) for frame in frames) <= MAX_PACKET_BYTES
    sent = sum(len(frame) for frame in frames)
    assert sent < 2 * 16_000, sent  # 64 kbit/s is 8 kB/s; PCM was 192 kB/s
    pcm = decode_opus(frames)
    assert 1.8 * 48000 * 4 <= len(pcm) <= 2.2 * 48000 * 4, len(pcm)
    assert abs(tone_frequency(pcm) - 440) < 2, tone_frequency(pcm)
    # Opus is lossy: between the tone's edges its peaks come back within a few percent.
    assert abs(peak(steady(pcm)) - TONE_AMPLITUDE) < 0.05 * TONE_AMPLITUDE, peak(pcm)
    assert peak(pcm) < 1.2 * TONE_AMPLITUDE, peak(pcm)


@asynccontextmanager
async def stand_in_desktop(hello: bytes, stream: bytes) -> AsyncIterator[int]:
    """A sound port that greets with ``hello``, takes any answer, says OK and its format
    (in ``stream``), sends ``stream`` and holds the connection; yields its port."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(hello + bytes(16))
        await reader.readexactly(32)
        writer.write(b"OK" + stream)
        await writer.drain()
        await reader.read(1)  # until the gateway hangs up
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    async with server:
        yield server.sockets[0].getsockname()[1]


def through(gateway: GatewayProcess, ticket_key, hello: bytes, stream: bytes):  # type: ignore[no-untyped-def]
    """What a browser gets from a stand-in desktop through the gateway: the format frame,
    the binary frames, and the close code."""
    key, key_bytes = ticket_key

    async def scenario():  # type: ignore[no-untyped-def]
        async with stand_in_desktop(hello, stream) as port:
            gateway.send_state(state_for(key, session(SESSION_ID, port, audio_port=port)))
            await asyncio.to_thread(wait_until_applied, gateway)
            async with await open_socket(gateway.url + "/sound") as browser:
                await browser.send(ticket_for(key_bytes, SESSION_ID, "sound")[0])
                announced = json.loads(await browser.recv())
                frames: list[bytes] = []
                try:
                    async with asyncio.timeout(2):
                        while True:
                            frames.append(await browser.recv())  # type: ignore[arg-type]
                except (TimeoutError, ConnectionClosed):
                    pass
                return announced, frames, browser.close_code

    return asyncio.run(scenario())


def test_an_image_from_before_opus_is_still_heard_as_pcm(gateway, ticket_key) -> None:
    pcm = struct.pack("<4h", 1, 2, 3, 4) * 1000
    announced, frames, _code = through(
        gateway, ticket_key, MAGIC_PCM, FORMAT_PCM.pack(48000, 2, 16) + pcm
    )
    assert announced == {"format": "s16le", "rate": 48000, "channels": 2}
    assert b"".join(frames) == pcm


def test_a_packet_over_the_bound_closes_the_sound_with_4413(gateway, ticket_key) -> None:
    good = b"\xfc\xff\xfe"  # any bytes: the gateway passes packets, it does not decode them
    stream = (
        FORMAT.pack(CODEC_OPUS, 48000, 2)
        + PACKET_LENGTH.pack(len(good))
        + good
        + PACKET_LENGTH.pack(MAX_PACKET_BYTES + 1)
        + bytes(MAX_PACKET_BYTES + 1)
    )
    announced, frames, code = through(gateway, ticket_key, MAGIC, stream)
    assert announced == {"format": "opus", "rate": 48000, "channels": 2}
    assert frames == [good]
    assert code == CLOSE_TOO_BIG
