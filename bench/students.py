"""The students of the class benchmarks (``bench.class_start``, ``bench.storm``): each
opens the live updates (the WebSocket ``/ws/updates/``, as the home page does), asks for a
desktop through the API at a given moment, and waits for RUNNING on the socket.

All of them run as coroutines of one event loop, each with its own connections (as each
browser has). The students stand in for two hundred phones: one thread each, as before, cost
the machine under test more CPU (the GIL handed between 400 threads) than the portal's own
work per student, and slowed the storm they measured.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
from websockets.asyncio.client import ClientConnection, connect
from websockets.typing import Origin

SILENT_S = 5.0  # without an update this long, a student asks the API (a missed push)
END_STATES = {"FAILED", "LOST", "EXPIRED", "CANCELLED", "ENDED"}


@dataclass
class Student:
    """One student of the class, with their own API token and logged-in web session."""

    user: Any  # the User (the benchmarks make them in the database)
    token: str
    cookie: str
    session_id: int | None = None
    submitted: float = 0.0  # time.monotonic() just before the POST
    submitted_wall: float = 0.0  # time.time() then, to compare with the session's timestamps
    running: float | None = None
    via: str = ""  # "ws" (pushed) or "api" (asked after SILENT_S without an update)
    states: list[str] = field(default_factory=list)
    error: str = ""

    @property
    def elapsed(self) -> float | None:
        return None if self.running is None else self.running - self.submitted


def run_students(
    url: str,
    students: Sequence[Student],
    body: dict,
    *,
    cookie_name: str,
    connect_at: Sequence[float],
    ask_at: Sequence[float],
    timeout_s: float,
) -> None:
    """Every student connects at ``connect_at[n]`` and asks at ``ask_at[n]`` (monotonic
    seconds); returns when each is RUNNING, has failed, or timed out."""

    async def everyone() -> None:
        await asyncio.gather(
            *(
                _student(url, s, body, cookie_name, connect_at[n], ask_at[n], timeout_s)
                for n, s in enumerate(students)
            )
        )

    asyncio.run(everyone())


async def until(moment: float) -> None:
    await asyncio.sleep(max(0.0, moment - time.monotonic()))


async def submit(api: httpx.AsyncClient, student: Student, body: dict) -> bool:
    """Ask for the desktop, noting when; False with the answer as the error if refused."""
    student.submitted, student.submitted_wall = time.monotonic(), time.time()
    created = await api.post("/api/v1/sessions/", json=body)
    if created.status_code != 201:
        student.error = f"submit answered {created.status_code}: {created.text[:200]}"
        return False
    student.session_id = created.json()["id"]
    return True


async def _student(
    url: str,
    student: Student,
    body: dict,
    cookie_name: str,
    connect_at: float,
    ask_at: float,
    timeout_s: float,
) -> None:
    ws_url = url.replace("http://", "ws://", 1) + "/ws/updates/?fragment=item"  # the home page
    cookie = {"Cookie": f"{cookie_name}={student.cookie}"}
    headers = {"Authorization": f"Token {student.token}"}
    await until(connect_at)
    try:
        async with (
            connect(ws_url, origin=Origin(url), additional_headers=cookie, open_timeout=60) as ws,
            httpx.AsyncClient(base_url=url, headers=headers, timeout=30) as api,
        ):
            await until(ask_at)
            if await submit(api, student, body):
                await _wait_running(ws, api, student, time.monotonic() + timeout_s)
    except Exception as error:  # a student's failure is reported with the figures
        student.error = f"{type(error).__name__}: {error}"


async def _wait_running(
    ws: ClientConnection, api: httpx.AsyncClient, student: Student, deadline: float
) -> None:
    """Read the student's live updates until their session is RUNNING (or ends).

    Only after ``SILENT_S`` without an update is the API asked (a missed push must not hang
    the run; asking more often would load the portal that is being measured)."""
    while time.monotonic() < deadline:
        try:
            message = json.loads(await asyncio.wait_for(ws.recv(), SILENT_S))
        except TimeoutError:
            answer = await api.get(f"/api/v1/sessions/{student.session_id}/")
            if answer.json()["state"] == "RUNNING":
                student.running, student.via = time.monotonic(), "api"
                return
            continue
        session = message.get("session") or {}
        if message.get("type") != "session.update" or session.get("id") != student.session_id:
            continue
        student.states.append(session["state"])
        if session["state"] == "RUNNING":
            student.running, student.via = time.monotonic(), "ws"
            return
        if session["state"] in END_STATES:
            student.error = f"session ended {session['state']}: {session.get('reason', '')}"
            return
    student.error = "no RUNNING before the timeout"
