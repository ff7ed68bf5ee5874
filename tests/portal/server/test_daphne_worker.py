"""The ASGI worker's flow control (portal.server.daphne_worker; issue 34, item 0).

A real worker process serves a hostile application (``flood_app``): one that sends as fast
as ``send`` returns, and one that never takes what the browser sends. A real WebSocket
client stops reading, or sends as fast as it may. The worker must hold the other side back
(the application's ``send`` waits for the browser's drain; reading the socket pauses while
the application's inbox is full) and its memory must stay flat. Plain daphne queued all of
it: the same test grows it by gigabytes.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import websockets

from tests.integration.stack import ROOT, free_port, wait_for

MIB = 1024 * 1024
STALL_S = 4.0
HELD_BACK_MIB = 64  # socket buffers on both sides and a few messages; not everything
GROWTH_MB = 64


@dataclass
class Worker:
    process: subprocess.Popen
    port: int
    count: Path

    def sent(self) -> int:
        text = self.count.read_text() if self.count.exists() else ""
        return int(text or 0)

    def rss_mb(self) -> float:
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        raise AssertionError("no VmRSS")


def answers(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=1):
            return True
    except OSError:
        return False


@pytest.fixture
def worker(tmp_path) -> Iterator[Worker]:
    port = free_port()
    count = tmp_path / "sent"
    log = (tmp_path / "worker.log").open("ab")
    process = subprocess.Popen(
        [sys.executable, "-m", "portal.server.daphne_worker", "-b", "127.0.0.1", "-p",
         str(port), "tests.portal.server.flood_app:application"],
        cwd=ROOT, env={"PATH": "/usr/bin:/bin", "FLOOD_COUNT_FILE": str(count)},
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        wait_for(lambda: answers(port), 30, "the worker")
        yield Worker(process, port, count)
    finally:
        process.kill()
        process.wait()
        log.close()


def test_an_application_sending_to_a_browser_that_stopped_reading_is_held_back(worker):
    async def run() -> tuple[int, float, int]:
        async with websockets.connect(
            f"ws://127.0.0.1:{worker.port}/flood/", max_size=None, max_queue=1
        ) as browser:
            await browser.recv()
            before, sent_before = worker.rss_mb(), worker.sent()
            largest = before
            started = time.monotonic()
            while time.monotonic() - started < STALL_S:
                largest = max(largest, worker.rss_mb())
                await asyncio.sleep(0.1)
            held = worker.sent() - sent_before
            read = 0
            async with asyncio.timeout(20):
                while read < 8 * MIB:
                    read += len(await browser.recv())
            return held, largest - before, read

    held, growth_mb, read = asyncio.run(run())
    print(f"the application got rid of {held} B while nobody read; the worker grew {growth_mb} MB")
    assert held < HELD_BACK_MIB * MIB
    assert growth_mb < GROWTH_MB
    assert read >= 8 * MIB  # and it goes on once the browser reads


def test_a_browser_flooding_an_application_that_takes_nothing_is_held_back(worker):
    message = b"\0" * (512 * 1024)

    async def run() -> tuple[int, float]:
        async with websockets.connect(f"ws://127.0.0.1:{worker.port}/sink/") as browser:
            before = largest = worker.rss_mb()
            sent = 0

            async def flood() -> None:
                nonlocal sent
                while True:
                    await browser.send(message)
                    sent += len(message)

            sender = asyncio.create_task(flood())
            started = time.monotonic()
            while time.monotonic() - started < STALL_S:
                largest = max(largest, worker.rss_mb())
                await asyncio.sleep(0.1)
            sender.cancel()
            return sent, largest - before

    sent, growth_mb = asyncio.run(run())
    print(f"the browser got rid of {sent} B; the worker grew {growth_mb} MB")
    assert sent < HELD_BACK_MIB * MIB
    assert growth_mb < GROWTH_MB
