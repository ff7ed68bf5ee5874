"""The storm of ``python -m bench.storm``, run with the demo stack's settings:
``python -m bench.storm_run URL STUDENTS SPREAD_S TIMEOUT_S [--outside POLL_S]``, started by
the benchmark once the stack is up and the environment names its database and Redis; prints
the figures, exits 1 when a student did not get a desktop. With ``--outside``, the students
are outside clients (``bench.outside``): password sign-in, a hobby CPU desktop, polling."""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
django.setup()
logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per request hides the figures

from django.conf import settings  # noqa: E402

from bench.class_start import (  # noqa: E402
    bench_profile,
    make_class,
    phase_lines,
    phases,
    spread,
)
from bench.cpu import cpu_by_process, cpu_line  # noqa: E402
from bench.outside import OutsideStudent, make_outside_class, run_outside  # noqa: E402
from bench.students import Student, run_students  # noqa: E402
from scheduling.models import DesktopProfile, Node, Slice  # noqa: E402
from scheduling.redis_client import shared_redis  # noqa: E402
from scheduling.services.metrics import CYCLE_HISTOGRAM_KEY  # noqa: E402
from tests.integration.stack import wait_for  # noqa: E402

CONNECT_SPREAD_S = 20.0


@dataclass
class StormRun:
    students: list[Student]
    times: list[float]
    errors: int
    cycles: int
    cycle_seconds: float  # their total
    cycle_buckets: dict[str, float] = field(default_factory=dict)
    phases: dict[str, list[float]] = field(default_factory=dict)
    wall_s: float = 0.0
    cpu_window: str = ""  # every role's CPU from the first ask to the end (cpu_line)
    outside: bool = False


def cpu() -> float:
    """This process's CPU seconds (the students', one event loop)."""
    return time.process_time()


def cycle_histogram() -> dict[str, float]:
    stored = shared_redis().hgetall(CYCLE_HISTOGRAM_KEY)
    return {(k.decode() if isinstance(k, bytes) else k): float(v) for k, v in stored.items()}


def run_storm(url: str, seats: int, spread_s: float, timeout_s: float) -> StormRun:
    wait_for(
        lambda: (
            Slice.objects.filter(
                present=True, gpu__present=True, gpu__node__last_heartbeat__isnull=False
            ).count()
            >= seats
        ),
        120,
        "every simulated node registered with its slices",
    )
    course, _, students = make_class("storm", seats)
    profile = bench_profile()
    body = {"profile": profile.pk, "purpose": "coursework", "course": course.code}
    # The students open their home pages over the minutes before class (here over
    # CONNECT_SPREAD_S), then all ask within ``spread_s`` of the start.
    now = time.monotonic()
    opens = now + CONNECT_SPREAD_S + 5.0
    before = cycle_histogram()
    at_first_ask: list[tuple[float, dict]] = []
    sample = threading.Timer(
        opens - time.monotonic(), lambda: at_first_ask.append((cpu(), cpu_by_process()))
    )
    sample.start()
    run_students(
        url,
        students,
        body,
        cookie_name=settings.SESSION_COOKIE_NAME,
        connect_at=[now + CONNECT_SPREAD_S * n / seats for n in range(seats)],
        ask_at=[opens + spread_s * n / seats for n in range(seats)],
        timeout_s=timeout_s,
    )
    return _finish(students, opens, at_first_ask, before)


def run_outside_storm(
    url: str, seats: int, spread_s: float, timeout_s: float, poll_s: float
) -> StormRun:
    """The storm as an outside client makes it (``bench.outside``): every student signs in
    and asks for the demo's CPU-only desktop (hobby) within ``spread_s``, then polls."""
    wait_for(
        lambda: Node.objects.filter(last_heartbeat__isnull=False).exists(),
        120,
        "a node registered and heard from",
    )
    students = make_outside_class("storm-outside", seats)
    profile = DesktopProfile.objects.get(slug="cpu-desktop")
    body = {"profile": profile.pk, "purpose": "hobby"}
    opens = time.monotonic() + 2.0
    before = cycle_histogram()
    at_first_ask: list[tuple[float, dict]] = []
    sample = threading.Timer(
        opens - time.monotonic(), lambda: at_first_ask.append((cpu(), cpu_by_process()))
    )
    sample.start()
    asks = [opens + spread_s * n / seats for n in range(seats)]
    run_outside(url, students, body, ask_at=asks, poll_s=poll_s, timeout_s=timeout_s)
    return _finish(students, opens, at_first_ask, before, outside=True)


def _finish(
    students: Sequence[Student],
    opens: float,
    at_first_ask: list[tuple[float, dict]],
    before: dict[str, float],
    *,
    outside: bool = False,
) -> StormRun:
    """The figures of a storm that began (its first ask) at ``opens``."""
    wall = time.monotonic() - opens
    students_cpu, processes = at_first_ask[0] if at_first_ask else (cpu(), {})
    window = cpu_line(processes, cpu_by_process(), wall, the_students=cpu() - students_cpu)
    after = cycle_histogram()
    delta = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
    return StormRun(
        students=list(students),
        times=sorted(s.elapsed for s in students if s.elapsed is not None),
        errors=sum(1 for s in students if s.error),
        cycles=int(delta.get("count", 0)),
        cycle_seconds=delta.get("sum", 0.0),
        cycle_buckets={k: v for k, v in delta.items() if k.startswith("le:")},
        phases=phases(students),
        wall_s=wall,
        cpu_window=window,
        outside=outside,
    )


def _error_kind(error: str) -> str:
    answered = ("submit answered", "sign-in answered", "poll answered")
    return error.split(":")[0] if error.startswith(answered) else error[:60]


def report(run: StormRun) -> list[str]:
    seats = len(run.students)
    lines = []
    errors = Counter(_error_kind(s.error) for s in run.students if s.error)
    for kind, count in errors.most_common():
        lines.append(f"error × {count}: {kind}")
    seen = Counter(s.via for s in run.students if s.via)
    if run.outside:
        lines += _outside_lines(run.students)
    elif run.times:
        lines.append(
            f"submit -> RUNNING over {len(run.times)} of {seats} students: {spread(run.times)} "
            f"(seen on the WebSocket: {seen.get('ws', 0)}, asked after silence: "
            f"{seen.get('api', 0)})"
        )
    lines.append(f"errors: {run.errors}; all done {run.wall_s:.1f} s after the first ask")
    # The students' share here is the asking and waiting; the rest of theirs, in the stack's
    # line below, is making the class and connecting.
    lines.append(f"from the first ask to the end, {run.cpu_window}")
    what = {
        "request": "POST -> session stored",
        "placement": "stored -> placed (scheduling cycles)",
        "desktop": "placed -> RUNNING stored (agent told, simulated start, report)",
        "push": "RUNNING stored -> seen by the student's poll"
        if run.outside
        else "RUNNING stored -> seen by the student's page",
    }
    lines += phase_lines(run.phases, what)
    if run.cycles:
        cumulative = sorted(
            ((float(k[3:]), v) for k, v in run.cycle_buckets.items()), key=lambda kv: kv[0]
        )
        p95 = next((b for b, n in cumulative if n >= 0.95 * run.cycles), float("inf"))
        lines.append(
            f"scheduling cycles during the storm: {run.cycles} for {seats} submissions, "
            f"mean {run.cycle_seconds / run.cycles:.3f} s, p95 <= {p95:g} s (histogram bucket)"
        )
    return lines


def _outside_lines(students: list[Student]) -> list[str]:
    outside = [s for s in students if isinstance(s, OutsideStudent)]
    lines = []
    signins = sorted(s.signin_s for s in outside if s.signin_s is not None)
    if signins:
        lines.append(f"sign-in (POST /api/v1/auth/token/) over {len(signins)}: {spread(signins)}")
    times = sorted(s.elapsed for s in outside if s.elapsed is not None)
    if times:
        lines.append(
            f"submit -> RUNNING seen by polling over {len(times)} of {len(outside)} students: "
            f"{spread(times)}"
        )
    whole = sorted(s.elapsed + (s.signin_s or 0.0) for s in outside if s.elapsed is not None)
    if whole:
        polls = sum(s.polls for s in outside)
        lines.append(f"sign-in -> RUNNING seen: {spread(whole)}; {polls} polls")
    return lines


def main() -> int:
    url, seats, spread_s, timeout_s = sys.argv[1:5]
    if sys.argv[5:6] == ["--outside"]:
        poll_s = float(sys.argv[6])
        run = run_outside_storm(url, int(seats), float(spread_s), float(timeout_s), poll_s)
    else:
        run = run_storm(url, int(seats), float(spread_s), float(timeout_s))
    print(*report(run), sep="\n", flush=True)
    return 1 if run.errors > 0 or len(run.times) < int(seats) else 0


if __name__ == "__main__":
    sys.exit(main())
