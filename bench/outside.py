"""The class-start storm as an outside client sees it (``python -m bench.storm --outside``).

Each student is what a script or a phone app does with the public API only: sign in with a
user name and password (``POST /api/v1/auth/token/``), ask for a desktop
(``POST /api/v1/sessions/``) at once, then ask ``GET /api/v1/sessions/<id>/`` every
``poll_s`` (2 s) until it is RUNNING. No WebSocket: the time to RUNNING includes the
polling lag (RUNNING is seen on the first poll after it is stored).

All students run as coroutines of one event loop, each with its own connections.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass

import httpx
from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import make_password

from bench.students import END_STATES, Student, submit, until
from people.models import Course
from scheduling.choices import TERMINAL_STATES
from scheduling.models import Session
from scheduling.services.sessions import do_stop

PASSWORD = "storm-outside-password"


@dataclass
class OutsideStudent(Student):
    """A student who signs in with a password; ``signin_s`` is how long the token took."""

    username: str = ""
    signin_s: float | None = None
    polls: int = 0


def make_outside_class(code: str, seats: int) -> list[OutsideStudent]:
    """A course with ``seats`` enrolled students who sign in with :data:`PASSWORD`: made on
    the first run, reused after (a run against a long-lived ``make demo``). Sessions a
    previous run left open are stopped first. One hash for every account: hashing 200
    passwords here would cost the machine a minute of CPU before the storm."""
    people = get_user_model()
    course, _ = Course.objects.get_or_create(
        code=code, defaults={"title": f"Class of {seats} (outside client)", "department": "cs"}
    )
    encoded = make_password(PASSWORD)
    users = []
    for n in range(1, seats + 1):
        user, _ = people.objects.get_or_create(username=f"{code}-s{n:03d}")
        user.password = encoded
        user.is_active = True
        users.append(user)
    people.objects.bulk_update(users, ["password", "is_active"])
    course.students.add(*users)
    for session in Session.objects.filter(user__in=users).exclude(state__in=TERMINAL_STATES):
        do_stop(session.user, session)
    return [OutsideStudent(user=u, token="", cookie="", username=u.username) for u in users]


def run_outside(
    url: str,
    students: Sequence[OutsideStudent],
    body: dict,
    *,
    ask_at: Sequence[float],
    poll_s: float,
    timeout_s: float,
) -> None:
    """Every student signs in and asks at ``ask_at[n]`` (monotonic seconds), then polls;
    returns when each is RUNNING, has failed, or timed out."""

    async def everyone() -> None:
        limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
        await asyncio.gather(
            *(
                _student(url, s, body, ask_at[n], poll_s, timeout_s, limits)
                for n, s in enumerate(students)
            )
        )

    asyncio.run(everyone())


async def _student(
    url: str,
    student: OutsideStudent,
    body: dict,
    ask_at: float,
    poll_s: float,
    timeout_s: float,
    limits: httpx.Limits,
) -> None:
    await until(ask_at)
    try:
        async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as api:
            started = time.monotonic()
            answer = await api.post(
                "/api/v1/auth/token/", json={"username": student.username, "password": PASSWORD}
            )
            student.signin_s = time.monotonic() - started
            if answer.status_code != 200:
                student.error = f"sign-in answered {answer.status_code}: {answer.text[:200]}"
                return
            student.token = answer.json()["token"]
            api.headers["Authorization"] = f"Token {student.token}"
            if await submit(api, student, body):
                await _poll(api, student, time.monotonic() + timeout_s, poll_s)
    except Exception as error:  # a student's failure is reported with the figures
        student.error = f"{type(error).__name__}: {error}"


async def _poll(
    api: httpx.AsyncClient, student: OutsideStudent, deadline: float, poll_s: float
) -> None:
    while time.monotonic() < deadline:
        await asyncio.sleep(poll_s)
        answer = await api.get(f"/api/v1/sessions/{student.session_id}/")
        student.polls += 1
        if answer.status_code != 200:
            student.error = f"poll answered {answer.status_code}: {answer.text[:200]}"
            return
        state = answer.json()["state"]
        if not student.states or student.states[-1] != state:
            student.states.append(state)
        if state == "RUNNING":
            student.running, student.via = time.monotonic(), "poll"
            return
        if state in END_STATES:
            student.error = f"session ended {state}: {answer.json().get('reason', '')}"
            return
    student.error = "no RUNNING before the timeout"
