"""The real gateway process for tests: started as the agent starts it, fed state lines on its
stdin, its events read from its stdout; and the browser's side of a ticket."""

from __future__ import annotations

import base64
import json
import queue
import secrets
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from nodeagent.gateway.messages import GatewaySession, GatewayState
from nodeagent.gateway.tickets import Ticket, new_ticket_id, sign_ticket
from nodeagent.protocol_gateway import GatewayKey, RevokedTicket

NODE_ID = 7
KEY_ID = 3
ORIGIN = "https://deskpool.example.edu"
WAIT_S = 20.0  # for a line the gateway owes us


def new_key() -> tuple[GatewayKey, bytes]:
    key = secrets.token_bytes(32)
    text = base64.urlsafe_b64encode(key).rstrip(b"=").decode()
    return GatewayKey(kid=KEY_ID, key=text), key


def ticket_for(
    key: bytes, session_id: int, purpose: str = "screen", **overrides: Any
) -> tuple[str, Ticket]:
    """A signed ticket as the portal makes one, and its claims."""
    now = int(time.time())
    claims: dict[str, Any] = {
        "v": 1,
        "kid": KEY_ID,
        "nid": NODE_ID,
        "sid": session_id,
        "uid": 11,
        "sin": "hash-of-a-login-session",
        "pur": purpose,
        "path": "",
        "iat": now,
        "exp": now + 30,
        "jti": new_ticket_id(),
    }
    claims.update(overrides)
    ticket = Ticket(**claims)
    return sign_ticket(ticket, key), ticket


def session(session_id: int, port: int, **fields: Any) -> GatewaySession:
    values: dict[str, Any] = {
        "session_id": session_id,
        "host": "127.0.0.1",
        "port": port,
        "password": "s3cretpw",
    }
    values.update(fields)
    return GatewaySession(**values)


def revoked(ticket: Ticket, why: str) -> RevokedTicket:
    return RevokedTicket(ticket=ticket.jti, why=why)  # type: ignore[arg-type]


class GatewayProcess:
    """``python -m nodeagent.gateway --port 0`` with pipes; its stderr goes to ``log_path``."""

    def __init__(self, log_path: Path, *args: str) -> None:
        self.log_path = log_path
        self._log = log_path.open("wb")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "nodeagent.gateway", "--port", "0", *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
        )
        self.lines: queue.Queue[dict[str, Any]] = queue.Queue()
        threading.Thread(target=self._read_stdout, daemon=True).start()
        first = self.next_line()
        assert set(first) == {"listening"}, first
        self.port = int(first["listening"])
        self.url = f"ws://127.0.0.1:{self.port}"

    def _read_stdout(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(json.loads(line))  # a line that is not JSON fails the test here

    def next_line(self, timeout: float = WAIT_S) -> dict[str, Any]:
        return self.lines.get(timeout=timeout)

    def event(self, kind: str, timeout: float = WAIT_S) -> dict[str, Any]:
        """The next event of ``kind`` (events of other kinds before it are passed over)."""
        deadline = time.monotonic() + timeout
        while True:
            line = self.next_line(max(0.1, deadline - time.monotonic()))
            if line["kind"] == kind:
                return line

    def send_line(self, data: bytes) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(data + b"\n")
        self.process.stdin.flush()

    def send_state(self, state: GatewayState) -> None:
        self.send_line(state.model_dump_json().encode())

    def log(self) -> str:
        self._log.flush()
        return self.log_path.read_text()

    def wait_for_log(self, text: str, timeout: float = WAIT_S) -> str:
        deadline = time.monotonic() + timeout
        while text not in (log := self.log()):
            assert time.monotonic() < deadline, f"{text!r} not in the gateway's log:\n{log}"
            time.sleep(0.05)
        return log

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self._log.close()


def state_for(key: GatewayKey, *sessions: GatewaySession, node_id: int = NODE_ID) -> GatewayState:
    return GatewayState(node_id=node_id, keys=[key], origins=[ORIGIN], sessions=list(sessions))
