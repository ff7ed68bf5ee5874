"""The gateway under a hostile desktop (issue 34, items 0 and 5): the real gateway process, a
deskpool/tiny container running ``tests/integration/hostile_desktop.py`` in place of websockify
and deskpool-audio (it logs in as they do, then sends as fast as it is taken, and prints how
much was taken), and a browser that stops reading, or floods a desktop that does not read.

The gateway awaits each send's drain and keeps at most 4 messages unread a side, so a side
that stops reading stops the gateway reading the other: the desktop is held back after a few
MiB and the gateway's memory stays flat; once the browser reads again the stream goes on.
"""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from websockets.asyncio.client import ClientConnection

from tests.nodeagent.gateway.browser import closed_with, open_socket
from tests.nodeagent.gateway.gateway_process import (
    GatewayProcess,
    new_key,
    session,
    state_for,
    ticket_for,
)

pytestmark = pytest.mark.docker

HOSTILE = Path(__file__).resolve().parents[2] / "integration" / "hostile_desktop.py"
MIB = 1024 * 1024
STALL_S = 6.0  # how long the browser does not read (or floods)
# What the desktop may get rid of while nobody reads: the kernel's socket buffers on both
# sides of the gateway, 4 queued messages of 512 KiB, one in hand. Without flow control it
# is everything it can send, hundreds of MiB a second.
DESKTOP_HELD_BACK_MIB = 64
GATEWAY_GROWTH_MB = 64  # the gateway's resident memory may grow by less while it stalls
SESSION_ID = 4401


@dataclass
class HostileDesktop:
    container: object
    screen_port: int
    sound_port: int

    def sent(self) -> tuple[int, int]:
        """(screen bytes, sound bytes) its peers have taken so far."""
        lines = self.container.logs(tail=3).decode().strip().splitlines()  # type: ignore[attr-defined]
        found = re.search(r"sent screen=(\d+) sound=(\d+)", lines[-1] if lines else "")
        assert found, f"the hostile desktop printed {lines!r}"
        return int(found[1]), int(found[2])


@pytest.fixture
def hostile_desktop(docker_client, tiny_image) -> Iterator[HostileDesktop]:  # type: ignore[no-untyped-def]
    yield from run_hostile(docker_client, tiny_image, {})


@pytest.fixture
def opus_hostile_desktop(docker_client, tiny_image) -> Iterator[HostileDesktop]:  # type: ignore[no-untyped-def]
    """The hostile desktop serving Opus: packets of the largest length allowed, no end."""
    yield from run_hostile(docker_client, tiny_image, {"DESKTOP_SOUND": "opus"})


@pytest.fixture
def one_gib_desktop(docker_client, tiny_image) -> Iterator[HostileDesktop]:  # type: ignore[no-untyped-def]
    """The hostile desktop sending 1 GiB messages (websockify sends at most 64 KiB)."""
    yield from run_hostile(docker_client, tiny_image, {"DESKTOP_CHUNK": str(1024 * MIB)})


def run_hostile(docker_client, image: str, environment: dict[str, str]) -> Iterator[HostileDesktop]:  # type: ignore[no-untyped-def]
    container = docker_client.containers.run(
        image,
        entrypoint=["python3", "-u", "/hostile.py"],
        command=[],
        detach=True,
        environment=environment,
        name=f"deskpool-test-hostile-{uuid.uuid4().hex[:8]}",
        volumes={str(HOSTILE): {"bind": "/hostile.py", "mode": "ro"}},
        ports={"6080/tcp": ("127.0.0.1", None), "6081/tcp": ("127.0.0.1", None)},
    )
    try:
        container.reload()
        ports = container.attrs["NetworkSettings"]["Ports"]
        desktop = HostileDesktop(
            container,
            int(ports["6080/tcp"][0]["HostPort"]),
            int(ports["6081/tcp"][0]["HostPort"]),
        )
        deadline = time.monotonic() + 20
        while b"sent screen=" not in container.logs(tail=1):
            assert time.monotonic() < deadline, "the hostile desktop did not start"
            time.sleep(0.1)
        yield desktop
    finally:
        container.remove(force=True)


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for {pid}")


async def log_in_screen(browser: ClientConnection) -> None:
    """The browser's part of the handshake (security type None), then ClientInit."""
    await browser.send(await browser.recv())  # the version back
    await browser.recv()  # the security types
    await browser.send(bytes([1]))
    await browser.recv()  # SecurityResult
    await browser.send(b"\x01")


async def format_frame(browser: ClientConnection) -> None:
    assert '"rate": 48000' in str(await browser.recv())


@dataclass
class Stall:
    growth_mb: float  # the gateway's largest resident size during the stall, over before
    desktop_sent: int  # bytes the desktop got rid of during the stall
    desktop_sent_late: int  # of them, in the stall's second half
    read_after: int  # bytes the browser read once it read again


def start(gateway: GatewayProcess, desktop: HostileDesktop) -> bytes:
    """The gateway, told about the hostile desktop; its ticket key."""
    key, key_bytes = new_key()
    listed = session(SESSION_ID, desktop.screen_port, audio_port=desktop.sound_port)
    gateway.send_state(state_for(key, listed))
    return key_bytes


async def stall(
    gateway: GatewayProcess,
    desktop: HostileDesktop,
    purpose: str,
    key: bytes,
    log_in: Callable[[ClientConnection], Awaitable[None]],
) -> Stall:
    kind = 0 if purpose == "screen" else 1
    pid = gateway.process.pid
    # max_queue=1: once a message waits unread, this browser stops reading its socket.
    async with await open_socket(f"{gateway.url}/{purpose}", max_size=None, max_queue=1) as browser:
        await browser.send(ticket_for(key, SESSION_ID, purpose)[0])
        await log_in(browser)
        await browser.recv()  # the stream has begun
        before = largest = rss_mb(pid)
        sent_at_start = desktop.sent()[kind]
        started, half = time.monotonic(), None
        while (elapsed := time.monotonic() - started) < STALL_S:
            largest = max(largest, rss_mb(pid))
            if half is None and elapsed >= STALL_S / 2:
                half = desktop.sent()[kind]
            await asyncio.sleep(0.1)
        sent_at_end = desktop.sent()[kind]
        read_after = 0
        async with asyncio.timeout(20):
            while read_after < 8 * MIB:
                read_after += len(await browser.recv())
    return Stall(
        largest - before,
        sent_at_end - sent_at_start,
        sent_at_end - (half if half is not None else sent_at_end),
        read_after,
    )


def assert_held_back(result: Stall) -> None:
    print(result)
    assert result.desktop_sent < DESKTOP_HELD_BACK_MIB * MIB, result
    assert result.desktop_sent_late < 8 * MIB, result  # stopped, not merely slowed
    assert result.growth_mb < GATEWAY_GROWTH_MB, result
    assert result.read_after >= 8 * MIB  # and the stream goes on once the browser reads


def test_the_gateway_stops_reading_a_desktop_while_its_viewer_does_not_read(
    gateway, hostile_desktop
) -> None:
    key = start(gateway, hostile_desktop)
    assert_held_back(asyncio.run(stall(gateway, hostile_desktop, "screen", key, log_in_screen)))


def test_the_gateway_stops_reading_a_desktops_sound_while_its_listener_does_not_read(
    gateway, hostile_desktop
) -> None:
    key = start(gateway, hostile_desktop)
    assert_held_back(asyncio.run(stall(gateway, hostile_desktop, "sound", key, format_frame)))


def test_the_gateway_stops_reading_a_desktops_opus_while_its_listener_does_not_read(
    gateway, opus_hostile_desktop
) -> None:
    key = start(gateway, opus_hostile_desktop)
    assert_held_back(asyncio.run(stall(gateway, opus_hostile_desktop, "sound", key, format_frame)))


def test_a_browser_flooding_a_desktop_that_does_not_read_is_held_back_too(
    gateway, hostile_desktop
) -> None:
    """The other way: the hostile desktop reads nothing past the ClientInit, and the browser
    sends as fast as it may. The gateway stops reading the browser once a few messages wait."""
    key = start(gateway, hostile_desktop)
    pid = gateway.process.pid
    message = b"\0" * (512 * 1024)  # under the gateway's 1 MiB a message

    async def flood() -> tuple[float, int]:
        async with await open_socket(
            gateway.url + "/screen", max_size=None, max_queue=1
        ) as browser:
            await browser.send(ticket_for(key, SESSION_ID)[0])
            await log_in_screen(browser)
            before = largest = rss_mb(pid)
            sent = 0

            async def send_all() -> None:
                nonlocal sent
                while True:
                    await browser.send(message)  # returns once the socket took it
                    sent += len(message)

            sender = asyncio.create_task(send_all())
            started = time.monotonic()
            while time.monotonic() - started < STALL_S:
                largest = max(largest, rss_mb(pid))
                await asyncio.sleep(0.1)
            sender.cancel()
            return largest - before, sent

    growth_mb, sent = asyncio.run(flood())
    print(f"browser flood: the gateway grew {growth_mb:.1f} MB, the browser sent {sent} B")
    assert sent < DESKTOP_HELD_BACK_MIB * MIB
    assert growth_mb < GATEWAY_GROWTH_MB


def test_a_message_over_1_mib_from_the_browser_closes_with_4413(gateway, hostile_desktop) -> None:
    key = start(gateway, hostile_desktop)

    async def too_big() -> int | None:
        async with await open_socket(gateway.url + "/screen", max_size=None) as browser:
            await browser.send(ticket_for(key, SESSION_ID)[0])
            await log_in_screen(browser)
            await browser.send(b"\0" * (MIB + 1))
            return await closed_with(browser)

    assert asyncio.run(too_big()) == 4413


def test_a_1_gib_message_from_the_desktop_closes_the_screen_with_4413_unread(
    gateway, one_gib_desktop
) -> None:
    """websockets refuses a frame over 1 MiB from its header: the gateway reads none of the
    gigabyte, closes the browser's side with 4413, and its memory stays flat."""
    key = start(gateway, one_gib_desktop)
    pid = gateway.process.pid

    async def huge() -> tuple[int | None, float]:
        before = largest = rss_mb(pid)
        async with await open_socket(gateway.url + "/screen", max_size=None) as browser:
            await browser.send(ticket_for(key, SESSION_ID)[0])
            await log_in_screen(browser)
            # The desktop makes its gigabyte before it sends the header: give it time.
            closing = asyncio.create_task(closed_with(browser, within=60))
            while not closing.done():
                largest = max(largest, rss_mb(pid))
                await asyncio.sleep(0.05)
            return closing.result(), largest - before

    code, growth_mb = asyncio.run(huge())
    print(f"1 GiB message: closed {code}, the gateway grew {growth_mb:.1f} MB")
    assert code == 4413
    assert growth_mb < GATEWAY_GROWTH_MB
