"""``python -m bench.gateway_files``: a 1 GiB upload and download through the node's gateway.

Starts the real gateway (``python -m nodeagent.gateway``, as the agent starts it), gives it
a desktop whose home is a folder under ``--root`` (on the disk the homes live on), then
uploads ``--mb`` MiB of random bytes with a ticket (``PUT /files/upload``, Content-Length,
streamed from a generator) and downloads them again (``GET /files/download``), checking the
SHA-256 both ways. Prints each direction's time and rate, and the gateway's peak RSS: the
largest ``VmRSS`` sampled every 20 ms during the transfers, and the kernel's ``VmHWM`` (the
high-water mark since the process started). Issue 34's goal: under 100 MB.

The HTTP helpers here (:func:`upload`, :func:`download`) are also the tests' browser
(tests/nodeagent/gateway/test_gateway_files.py).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import http.client
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from nodeagent.gateway.messages import GatewaySession, GatewayState
from nodeagent.gateway.tickets import Ticket, new_ticket_id, sign_ticket
from nodeagent.protocol_gateway import GatewayKey

MB = 1024 * 1024
ORIGIN = "https://deskpool.example.edu"
NODE_ID, KEY_ID, SESSION_ID = 7, 3, 41
TIMEOUT_S = 600.0


@dataclass
class Answer:
    status: int
    headers: dict[str, str]  # names in lower case
    body: bytes
    digest: str = ""  # a streamed download's SHA-256 (its body is then empty)
    size: int = 0


def upload(
    port: int,
    ticket: str,
    size: int,
    chunks: Iterable[bytes],
    *,
    origin: str | None = ORIGIN,
    extra: dict[str, str] | None = None,
) -> Answer:
    """``PUT /files/upload`` with ``size`` bytes from ``chunks`` (a Content-Length body)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT_S)
    try:
        connection.putrequest("PUT", "/files/upload", skip_accept_encoding=True)
        headers = {"Content-Length": str(size), "X-Deskpool-Ticket": ticket}
        if origin is not None:
            headers["Origin"] = origin
        for name, value in (headers | (extra or {})).items():
            connection.putheader(name, value)
        connection.endheaders()
        try:
            for chunk in chunks:
                connection.send(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused early: its answer may still be there to read
        response = connection.getresponse()
        return Answer(response.status, lower(response.getheaders()), response.read())
    finally:
        connection.close()


def download(port: int, ticket: str, *, origin: str | None = None, stream: bool = False) -> Answer:
    """``GET /files/download?ticket=…``; ``stream``: hash the body instead of keeping it."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT_S)
    try:
        headers = {"Origin": origin} if origin is not None else {}
        connection.request("GET", f"/files/download?ticket={quote(ticket)}", headers=headers)
        response = connection.getresponse()
        answer = Answer(response.status, lower(response.getheaders()), b"")
        if not stream or response.status != 200:
            answer.body = response.read()
            return answer
        digest = hashlib.sha256()
        while chunk := response.read(MB):
            digest.update(chunk)
            answer.size += len(chunk)
        answer.digest = digest.hexdigest()
        return answer
    finally:
        connection.close()


def lower(headers: list[tuple[str, str]]) -> dict[str, str]:
    return {name.lower(): value for name, value in headers}


def new_key() -> tuple[GatewayKey, bytes]:
    key = secrets.token_bytes(32)
    return GatewayKey(kid=KEY_ID, key=base64.urlsafe_b64encode(key).rstrip(b"=").decode()), key


def sign(key: bytes, purpose: str, path: str, **overrides: object) -> tuple[str, Ticket]:
    """A ticket as the portal signs one."""
    now = int(time.time())
    claims: dict[str, object] = {
        "v": 1,
        "kid": KEY_ID,
        "nid": NODE_ID,
        "sid": SESSION_ID,
        "uid": 11,
        "sin": "hash-of-a-login-session",
        "pur": purpose,
        "path": path,
        "iat": now,
        "exp": now + 30,
        "jti": new_ticket_id(),
    }
    claims.update(overrides)
    ticket = Ticket(**claims)  # type: ignore[arg-type]
    return sign_ticket(ticket, key), ticket


def random_chunks(size: int, digest: hashlib._Hash) -> Iterator[bytes]:
    """``size`` random-looking bytes, a MiB at a time, fed to ``digest`` as they go."""
    block = os.urandom(MB)
    sent = 0
    while sent < size:
        chunk = block[: min(MB, size - sent)]
        block = block[1:] + block[:1]  # each MiB differs from the one before
        digest.update(chunk)
        sent += len(chunk)
        yield chunk


class RssSampler(threading.Thread):
    """The largest VmRSS of a process, sampled every 20 ms until :meth:`stop`."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.peak_kb = 0
        self._done = threading.Event()

    def run(self) -> None:
        while not self._done.wait(0.02):
            self.peak_kb = max(self.peak_kb, status_kb(self.pid, "VmRSS"))

    def stop(self) -> int:
        self._done.set()
        self.join()
        return self.peak_kb


def status_kb(pid: int, field: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


class Gateway:
    """The gateway process with one desktop whose home is ``home``."""

    def __init__(self, home: Path) -> None:
        self.key, self.key_bytes = new_key()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "nodeagent.gateway", "--port", "0"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        assert self.process.stdout is not None and self.process.stdin is not None
        self.port = int(json.loads(self.process.stdout.readline())["listening"])
        desktop = GatewaySession(
            session_id=SESSION_ID, host="127.0.0.1", port=1, password="s3cretpw", home_dir=str(home)
        )
        state = GatewayState(node_id=NODE_ID, keys=[self.key], origins=[ORIGIN], sessions=[desktop])
        self.process.stdin.write(state.model_dump_json().encode() + b"\n")
        self.process.stdin.flush()
        time.sleep(0.5)  # the state is applied

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(10)


def measure(root: Path, megabytes: int) -> dict[str, float]:
    """Upload then download ``megabytes`` MiB through a fresh gateway; the figures."""
    home = Path(tempfile.mkdtemp(prefix="deskpool-bench-home-", dir=root))
    gateway = Gateway(home)
    size = megabytes * MB
    try:
        sampler = RssSampler(gateway.process.pid)
        rss_before = status_kb(gateway.process.pid, "VmRSS")
        sampler.start()
        sent = hashlib.sha256()
        ticket, _ = sign(gateway.key_bytes, "upload", "big.bin")
        started = time.monotonic()
        answer = upload(gateway.port, ticket, size, random_chunks(size, sent))
        up_s = time.monotonic() - started
        assert answer.status == 201, (answer.status, answer.body)
        ticket, _ = sign(gateway.key_bytes, "download", "big.bin")
        started = time.monotonic()
        got = download(gateway.port, ticket, stream=True)
        down_s = time.monotonic() - started
        assert got.status == 200 and got.size == size, (got.status, got.size)
        assert got.digest == sent.hexdigest(), "the bytes came back changed"
        peak_kb = sampler.stop()
        return {
            "mib": megabytes,
            "upload_s": up_s,
            "upload_mb_s": megabytes / up_s,
            "download_s": down_s,
            "download_mb_s": megabytes / down_s,
            "rss_before_mb": rss_before / 1024,
            "rss_peak_mb": peak_kb / 1024,
            "vm_hwm_mb": status_kb(gateway.process.pid, "VmHWM") / 1024,
        }
    finally:
        gateway.stop()
        shutil.rmtree(home, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.gateway_files", description=__doc__)
    parser.add_argument("--mb", type=int, default=1024, help="MiB to move each way (1024)")
    parser.add_argument("--root", type=Path, default=Path("/var/tmp"), help="where the home is")
    args = parser.parse_args(argv)
    figures = measure(args.root, args.mb)
    print(
        f"gateway files, {figures['mib']} MiB each way, home under {args.root}:\n"
        f"  upload:   {figures['upload_s']:.1f} s ({figures['upload_mb_s']:.0f} MiB/s)\n"
        f"  download: {figures['download_s']:.1f} s ({figures['download_mb_s']:.0f} MiB/s)\n"
        f"  gateway RSS: {figures['rss_before_mb']:.1f} MB before, peak "
        f"{figures['rss_peak_mb']:.1f} MB sampled, VmHWM {figures['vm_hwm_mb']:.1f} MB "
        "(goal: under 100 MB)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
