"""The relays under a hostile desktop whose viewer stopped reading (issue 34, item 0).

Everything is real: the portal's ASGI worker (``portal.server.daphne_worker``, as deployed)
on the test database, a deskpool/tiny container on the real Docker engine running
``tests/integration/hostile_desktop.py`` in place of websockify and deskpool-audio (it logs
in as they do, then sends as fast as it is taken), and a browser socket that logs in through
the relay and then stops reading.

Without flow control the worker read everything the desktop sent and queued it for the
browser: 150 MB to 1.6 GB in 13 s (screen) and 2.7 GB in 14 s (sound). Now the worker
awaits the browser's drain and, while it waits, stops reading the desktop: the desktop is
held back after a few MiB, the worker's memory stays flat, and once the browser reads again
the stream goes on.
"""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import websockets
from websockets.typing import Origin

from scheduling.choices import SessionState
from scheduling.models import Node, Session
from tests.integration.stack import Stack, docker_client, image_present, wait_for
from tests.security.test_bad_input import signed_in_cookie

pytestmark = [pytest.mark.docker, pytest.mark.django_db(transaction=True)]

HOSTILE = Path(__file__).resolve().parents[1] / "integration" / "hostile_desktop.py"
IMAGE = "deskpool/tiny:latest"
MIB = 1024 * 1024
STALL_S = 6.0  # how long the browser does not read
# What the hostile desktop may get rid of while nobody reads: the kernel's socket buffers on
# both sides of the worker, the desktop-side queue (4 messages of 512 KiB), one message in
# the worker. Without flow control it is everything it can send (hundreds of MiB a second).
DESKTOP_HELD_BACK_MIB = 64
# The worker's resident memory may not grow by more than this while the browser stalls.
WORKER_GROWTH_MB = 64


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
def hostile_desktop() -> Iterator[HostileDesktop]:
    client = docker_client()
    if client is None:
        pytest.skip("no Docker engine answers (start dockerd; .ci/run does)")
    if not image_present(client, IMAGE):
        pytest.skip(f"{IMAGE} is not built: run `bash nodeagent/images/build.sh all`")
    container = client.containers.run(
        IMAGE,
        entrypoint=["python3", "-u", "/hostile.py"],
        command=[],
        detach=True,
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
        wait_for(lambda: b"sent screen=" in container.logs(tail=1), 20, "the hostile desktop")
        yield desktop
    finally:
        container.remove(force=True)


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for {pid}")


def hostile_session(owner, profile, desktop: HostileDesktop) -> Session:  # type: ignore[no-untyped-def]
    node = Node.objects.create(hostname=f"hostile-{desktop.screen_port}", address="127.0.0.1")
    return Session.objects.create(
        user=owner,
        profile=profile,
        purpose="hobby",
        state=SessionState.RUNNING,
        node=node,
        desktop_port=desktop.screen_port,
        desktop_audio_port=desktop.sound_port,
        vnc_password="secret12",
    )


async def log_in_screen(browser: websockets.ClientConnection) -> None:
    """The browser's part of the relay's handshake (security type None), then ClientInit."""
    await browser.send(await browser.recv())  # the version back
    await browser.recv()  # the security types
    await browser.send(bytes([1]))
    await browser.recv()  # SecurityResult
    await browser.send(b"\x01")


@dataclass
class Stall:
    growth_mb: float  # the worker's largest resident size during the stall, over before
    desktop_sent: int  # bytes the desktop got rid of during the stall
    desktop_sent_late: int  # of them, in the stall's second half
    read_after: int  # bytes the browser read once it read again


async def stall(
    portal: Stack, path: str, cookie: bytes, desktop: HostileDesktop, kind: int, log_in
) -> Stall:  # type: ignore[no-untyped-def]
    pid = portal.processes["portal"].pid
    url = portal.url.replace("http://", "ws://") + path
    async with websockets.connect(
        url,
        origin=Origin(portal.url),
        additional_headers={"Cookie": cookie.decode()},
        max_size=None,
        max_queue=1,  # once a message waits unread, this browser stops reading its socket
        open_timeout=30,
    ) as browser:
        await log_in(browser)
        await browser.recv()  # the stream has begun
        before = rss_mb(pid)
        sent_at_start = desktop.sent()[kind]
        largest = before
        started = time.monotonic()
        half = None
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
    assert result.growth_mb < WORKER_GROWTH_MB, result
    assert result.read_after >= 8 * MIB  # and the stream goes on once the browser reads


def test_the_screen_relay_stops_reading_a_desktop_while_its_viewer_does_not_read(
    daphne_portal, hostile_desktop, owner, profile
):
    session = hostile_session(owner, profile, hostile_desktop)
    cookie = signed_in_cookie(owner)
    result = asyncio.run(
        stall(
            daphne_portal, f"/ws/desktop/{session.pk}/", cookie, hostile_desktop, 0, log_in_screen
        )
    )
    assert_held_back(result)


def test_the_sound_relay_stops_reading_a_desktop_while_its_listener_does_not_read(
    daphne_portal, hostile_desktop, owner, profile
):
    session = hostile_session(owner, profile, hostile_desktop)
    cookie = signed_in_cookie(owner)

    async def format_frame(browser: websockets.ClientConnection) -> None:
        assert '"rate": 48000' in await browser.recv()

    result = asyncio.run(
        stall(
            daphne_portal,
            f"/ws/desktop/{session.pk}/audio/",
            cookie,
            hostile_desktop,
            1,
            format_frame,
        )
    )
    assert_held_back(result)


def test_a_browser_flooding_a_desktop_that_does_not_read_is_held_back_too(
    daphne_portal, hostile_desktop, owner, profile
):
    """The other way: the hostile desktop reads nothing past the ClientInit, and the browser
    sends as fast as it may. The worker stops reading the browser once a few messages wait."""
    session = hostile_session(owner, profile, hostile_desktop)
    cookie = signed_in_cookie(owner)
    pid = daphne_portal.processes["portal"].pid
    url = daphne_portal.url.replace("http://", "ws://") + f"/ws/desktop/{session.pk}/"
    message = b"\0" * (512 * 1024)  # under the worker's 1 MiB per message

    async def flood() -> tuple[float, int]:
        async with websockets.connect(
            url,
            origin=Origin(daphne_portal.url),
            additional_headers={"Cookie": cookie.decode()},
            max_size=None,
            max_queue=1,
            open_timeout=30,
        ) as browser:
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
    print(f"browser flood: worker grew {growth_mb:.1f} MB, the browser got rid of {sent} B")
    assert sent < DESKTOP_HELD_BACK_MIB * MIB
    assert growth_mb < WORKER_GROWTH_MB
