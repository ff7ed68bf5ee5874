"""16 parallel downloads of a 63 MB home file through the real gateway (issue 34, item 5).

Through the portal's database this added 834 MB to one worker and 383 MB to the other. The
gateway streams each file in fixed-size chunks and awaits each socket's drain: 16 at once
(two desktops of the person, 8 each: the gateway carries at most 8 downloads a desktop and
refuses a ninth with 429 and a sentence), by browsers reading as fast as they can, and 16
by browsers that stall, leave its memory under a fixed bound, and every byte arrives.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from bench.gateway_files import RssSampler, download, status_kb
from tests.nodeagent.gateway.gateway_process import GatewayProcess, session, state_for, ticket_for
from tests.nodeagent.gateway.test_gateway_files import home, preflight  # noqa: F401

pytestmark = pytest.mark.docker
MB = 1024 * 1024
SIZE = 63 * MB
PARALLEL = 16
GROWTH_BOUND_MB = 100  # the bound for the gateway's memory
DESKTOPS = (51, 52)  # two desktops of one person, one home
PER_DESKTOP = 8  # the gateway's cap on a desktop's downloads at once


@pytest.fixture
def two_desktops(
    gateway: GatewayProcess,
    ticket_key: Any,
    home: Path,  # noqa: F811
) -> tuple[GatewayProcess, bytes]:
    key, key_bytes = ticket_key
    sessions = [session(s, 1, home_volume="home-x", home_dir=str(home)) for s in DESKTOPS]
    gateway.send_state(state_for(key, *sessions))
    deadline = time.monotonic() + 10
    while not preflight(gateway).startswith("HTTP/1.1 204"):  # until it holds the state
        assert time.monotonic() < deadline, "the gateway did not take its state"
        time.sleep(0.05)
    return gateway, key_bytes


def tickets(key: bytes, path: str) -> list[str]:
    """16 download tickets, 8 for each desktop."""
    return [
        ticket_for(key, desktop, "download", path=path)[0]
        for desktop in DESKTOPS
        for _ in range(PER_DESKTOP)
    ]


def test_16_parallel_downloads_leave_the_gateway_under_a_fixed_bound(
    two_desktops: tuple[GatewayProcess, bytes],
    home: Path,  # noqa: F811
) -> None:
    gateway, key = two_desktops
    data = os.urandom(SIZE)
    (home / "big.bin").write_bytes(data)
    expected = hashlib.sha256(data).hexdigest()
    pid = gateway.process.pid
    before_kb = status_kb(pid, "VmRSS")
    sampler = RssSampler(pid)
    sampler.start()
    with ThreadPoolExecutor(PARALLEL) as pool:
        got = list(
            pool.map(lambda t: download(gateway.port, t, stream=True), tickets(key, "big.bin"))
        )
    peak_kb = sampler.stop()
    growth_mb = (peak_kb - before_kb) / 1024
    print(f"{PARALLEL} x {SIZE // MB} MB: the gateway grew {growth_mb:.1f} MB at most")
    assert [(a.status, a.size, a.digest) for a in got] == [(200, SIZE, expected)] * PARALLEL
    assert growth_mb < GROWTH_BOUND_MB


def test_16_stalled_downloads_hold_the_gateway_back_not_its_memory(
    two_desktops: tuple[GatewayProcess, bytes],
    home: Path,  # noqa: F811
) -> None:
    """Browsers that open a download and stop reading: the gateway sends what the sockets
    take and waits; it does not read the files into memory meanwhile. A ninth download of
    one desktop meanwhile is refused with 429 and a sentence."""
    gateway, key = two_desktops
    (home / "big.bin").write_bytes(os.urandom(SIZE))
    pid = gateway.process.pid
    before_kb = status_kb(pid, "VmRSS")
    sampler = RssSampler(pid)
    sampler.start()
    stalled: list[Any] = []
    opened = threading.Barrier(PARALLEL + 1)

    def stall(ticket: str) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", gateway.port, timeout=30)
        connection.request("GET", f"/files/download?ticket={quote(ticket)}")
        response = connection.getresponse()
        assert response.status == 200
        response.read(64 * 1024)  # a little, then nothing
        stalled.append((connection, response))  # both held: a dropped response closes
        opened.wait()

    threads = [
        threading.Thread(target=stall, args=(ticket,), daemon=True)
        for ticket in tickets(key, "big.bin")
    ]
    for thread in threads:
        thread.start()
    opened.wait(timeout=60)
    threading.Event().wait(3.0)  # the gateway has filled what the sockets take
    peak_kb = sampler.stop()
    ninth = download(gateway.port, ticket_for(key, DESKTOPS[0], "download", path="big.bin")[0])
    assert ninth.status == 429
    assert b"download connections open" in ninth.body
    for connection, _response in stalled:
        connection.close()
    growth_mb = (peak_kb - before_kb) / 1024
    print(f"{PARALLEL} stalled downloads: the gateway grew {growth_mb:.1f} MB at most")
    assert len(stalled) == PARALLEL
    assert growth_mb < GROWTH_BOUND_MB
