"""Home files through the real gateway process, into a real Docker volume's folder (where the
agent finds a home: ``DockerDesktops.home_folder``): upload then download, tickets refused,
links not followed, the quota, a broken upload, CORS, and 1 GiB in constant memory."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest

from bench.gateway_files import RssSampler, download, random_chunks, upload
from nodeagent.gateway.codes import (
    CLOSE_SESSION_ENDED,
    CLOSE_TICKET_FOREIGN,
    CLOSE_TICKET_INVALID,
    CLOSE_TICKET_REPLAYED,
)
from nodeagent.gateway.messages import GatewaySession
from nodeagent.home_files import TEMP_PREFIX
from tests.nodeagent.gateway.gateway_process import (
    ORIGIN,
    GatewayProcess,
    session,
    state_for,
    ticket_for,
)

pytestmark = pytest.mark.docker
SID = 41
MB = 1024 * 1024


@pytest.fixture
def home(docker_client: Any) -> Iterator[Path]:
    """A real Docker volume's folder, as the agent finds a home volume on its host."""
    volume = docker_client.volumes.create(f"deskpool-test-files-{os.getpid()}-{time.time_ns()}")
    folder = Path(volume.attrs["Mountpoint"])
    try:
        yield folder
    finally:
        volume.remove(force=True)


@pytest.fixture
def files(gateway: GatewayProcess, ticket_key: Any, home: Path) -> tuple[GatewayProcess, bytes]:
    key, key_bytes = ticket_key
    desktop: GatewaySession = session(SID, 1, home_volume="home-x", home_dir=str(home))
    gateway.send_state(state_for(key, desktop))
    deadline = time.monotonic() + 10
    while not preflight(gateway).startswith("HTTP/1.1 204"):  # until the state's origin holds
        assert time.monotonic() < deadline, "the gateway did not take its state"
        time.sleep(0.05)
    return gateway, key_bytes


def preflight(gateway: GatewayProcess) -> str:
    with socket.create_connection(("127.0.0.1", gateway.port)) as browser:
        browser.sendall(
            b"OPTIONS /files/upload HTTP/1.1\r\nHost: node\r\nOrigin: " + ORIGIN.encode() + b"\r\n"
            b"Access-Control-Request-Method: PUT\r\n\r\n"
        )
        return browser.recv(4096).decode()


def sign(key: bytes, purpose: str, path: str, **claims: Any) -> str:
    return ticket_for(key, SID, purpose, path=path, **claims)[0]


def put(gateway: GatewayProcess, ticket: str, data: bytes, **options: Any) -> Any:
    return upload(gateway.port, ticket, len(data), [data], **options)


def refusal_code(answer: Any) -> int:
    """An upload's refusal says it in JSON, a download's in a header (its body is a sentence)."""
    if "x-deskpool-refusal" in answer.headers:
        return int(answer.headers["x-deskpool-refusal"])
    return int(json.loads(answer.body)["code"])


def leftovers(folder: Path) -> list[str]:
    return sorted(name for name in os.listdir(folder) if name.startswith(TEMP_PREFIX))


def test_an_upload_comes_back_as_the_same_bytes_under_a_non_ascii_name(
    files: tuple[GatewayProcess, bytes], home: Path
) -> None:
    gateway, key = files
    (home / "报告").mkdir()
    data = os.urandom(3 * MB + 17)
    name = '报告/Übung 1 "final".bin'

    answer = put(gateway, sign(key, "upload", name, quota=100 * MB), data)
    assert answer.status == 201, answer.body
    assert answer.headers["access-control-allow-origin"] == ORIGIN
    assert (home / name).read_bytes() == data
    opened, closed = gateway.event("opened"), gateway.event("closed")
    assert opened["purpose"] == "upload" and closed["bytes_in"] == len(data)

    got = download(gateway.port, sign(key, "download", name))
    assert got.status == 200 and got.body == data
    assert got.headers["content-length"] == str(len(data))
    assert got.headers["x-content-type-options"] == "nosniff"
    disposition = got.headers["content-disposition"]
    assert disposition.startswith('attachment; filename="')
    assert unquote(disposition.split("filename*=UTF-8''")[1]) == 'Übung 1 "final".bin'
    assert gateway.event("closed")["bytes_out"] == len(data)


def test_replayed_forged_and_foreign_tickets_open_nothing(
    files: tuple[GatewayProcess, bytes], home: Path
) -> None:
    gateway, key = files
    (home / "mine.txt").write_bytes(b"mine")
    ticket = sign(key, "download", "mine.txt")
    assert download(gateway.port, ticket).body == b"mine"

    replayed = download(gateway.port, ticket)
    assert replayed.status == 403 and refusal_code(replayed) == CLOSE_TICKET_REPLAYED
    # The browser shows a refused download in its tab: a sentence, not JSON.
    assert replayed.headers["content-type"] == "text/plain; charset=utf-8"
    assert replayed.headers["x-content-type-options"] == "nosniff"
    assert replayed.body.decode().startswith(
        "The file could not be downloaded. The ticket was used before.\n\n"
        "A download link works once and for a few minutes only: go back to the Files page"
    )
    forged = download(gateway.port, ticket_for(os.urandom(32), SID, "download", path="mine.txt")[0])
    assert forged.status == 403 and refusal_code(forged) == CLOSE_TICKET_INVALID
    # An upload's ticket does not download, nor a download's upload.
    wrong = download(gateway.port, sign(key, "upload", "mine.txt"))
    assert wrong.status == 403 and refusal_code(wrong) == CLOSE_TICKET_FOREIGN
    wrong = put(gateway, sign(key, "download", "mine.txt"), b"overwritten")
    assert wrong.status == 403 and refusal_code(wrong) == CLOSE_TICKET_FOREIGN
    # A desktop the gateway does not hold.
    other = download(gateway.port, ticket_for(key, SID + 1, "download", path="mine.txt")[0])
    assert other.status == 410 and refusal_code(other) == CLOSE_SESSION_ENDED
    # A path out of the home is no path at all.
    escape = download(gateway.port, sign(key, "download", "../../../etc/passwd"))
    assert escape.status == 404 and b"root:" not in escape.body
    assert (home / "mine.txt").read_bytes() == b"mine"


def test_links_in_the_home_are_not_followed(
    files: tuple[GatewayProcess, bytes], home: Path, tmp_path: Path
) -> None:
    gateway, key = files
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_bytes(b"not yours")
    os.symlink(outside / "secret", home / "secret")
    os.symlink(outside, home / "elsewhere")

    got = download(gateway.port, sign(key, "download", "secret"))
    assert got.status == 404 and b"is a link" in got.body and b"not yours" not in got.body
    got = download(gateway.port, sign(key, "download", "elsewhere/secret"))
    assert got.status == 404 and b"not yours" not in got.body
    put_in = put(gateway, sign(key, "upload", "elsewhere/planted"), b"x")
    assert put_in.status == 409 and b"is a link" in put_in.body
    over = put(gateway, sign(key, "upload", "secret"), b"x")
    assert over.status == 409
    assert sorted(os.listdir(outside)) == ["secret"]
    assert (outside / "secret").read_bytes() == b"not yours"


def test_an_upload_over_the_quota_is_refused_at_once_and_writes_nothing(
    files: tuple[GatewayProcess, bytes], home: Path
) -> None:
    gateway, key = files
    (home / "old.bin").write_bytes(b"x" * (3 * MB))
    chunks_sent = 0

    def endless() -> Iterator[bytes]:  # would be 50 MiB; the answer comes before
        nonlocal chunks_sent
        for _ in range(50):
            chunks_sent += 1
            yield b"y" * MB

    answer = upload(gateway.port, sign(key, "upload", "new.bin", quota=4 * MB), 50 * MB, endless())
    assert answer.status == 413, answer.body
    assert "Your home folder is full" in answer.body.decode()
    assert not (home / "new.bin").exists() and leftovers(home) == []
    # Replacing a file frees its room: 3 MiB over the old 3 MiB fits in 4.
    assert put(gateway, sign(key, "upload", "old.bin", quota=4 * MB), b"z" * (3 * MB)).status == 201


def test_a_broken_upload_leaves_nothing(files: tuple[GatewayProcess, bytes], home: Path) -> None:
    gateway, key = files
    (home / "keep.txt").write_bytes(b"before")
    with socket.create_connection(("127.0.0.1", gateway.port)) as browser:
        browser.sendall(
            b"PUT /files/upload HTTP/1.1\r\nHost: node\r\nOrigin: " + ORIGIN.encode() + b"\r\n"
            b"X-Deskpool-Ticket: " + sign(key, "upload", "keep.txt").encode() + b"\r\n"
            b"Content-Length: " + str(10 * MB).encode() + b"\r\n\r\n" + b"a" * MB
        )
        gateway.event("opened")
        time.sleep(0.3)
    closed = gateway.event("closed")
    assert closed["bytes_in"] <= MB
    assert (home / "keep.txt").read_bytes() == b"before" and leftovers(home) == []


def test_uploads_answer_only_the_pages_origin(files: tuple[GatewayProcess, bytes]) -> None:
    gateway, key = files
    answer = preflight(gateway)
    assert answer.startswith("HTTP/1.1 204")
    assert f"Access-Control-Allow-Origin: {ORIGIN}\r\n" in answer
    assert "X-Deskpool-Ticket" in answer
    foreign = put(gateway, sign(key, "upload", "a.txt"), b"a", origin="https://evil.example")
    assert foreign.status == 403 and "access-control-allow-origin" not in foreign.headers
    assert put(gateway, sign(key, "upload", "a.txt"), b"a", origin=None).status == 403
    got = download(gateway.port, sign(key, "download", "a.txt"), origin="https://evil.example")
    assert got.status == 403


@pytest.mark.slow
def test_a_gibibyte_goes_up_and_down_in_constant_memory(
    files: tuple[GatewayProcess, bytes], home: Path
) -> None:
    gateway, key = files
    sampler = RssSampler(gateway.process.pid)
    sampler.start()
    sent = hashlib.sha256()
    size = 1024 * MB
    ticket = sign(key, "upload", "big.bin")
    assert upload(gateway.port, ticket, size, random_chunks(size, sent)).status == 201
    got = download(gateway.port, sign(key, "download", "big.bin"), stream=True)
    peak_mb = sampler.stop() / 1024
    assert got.status == 200 and got.size == size and got.digest == sent.hexdigest()
    assert peak_mb < 100, f"the gateway's RSS reached {peak_mb:.0f} MB"
