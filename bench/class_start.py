"""``python -m bench.class_start``: a booked class whose students all ask at once.

A 40-seat class (``--seats``) booked on a tiny-image profile; its window opens a minute
after the booking (inside the warm lead), so the worker's cycles start warm desktops ahead.
Every student asks within one second of the window opening (one coroutine, its own
connections and one API token each: ``bench.students``) and waits for RUNNING on
the WebSocket ``/ws/updates/`` (the API is asked only if the socket stays silent for 5 s).
Prints each student's submit → RUNNING, p50, p95 and max, and how many were placed on warm
desktops; then ends the class and removes every container it started.

Everything is real and on this machine: daphne, a Celery worker and a node agent on the
real Docker engine (``tests/integration/stack.py``), on the PostgreSQL server and Redis of
``DATABASE_URL`` and ``REDIS_URL``. Only the GPUs are a simulated fleet file. The
benchmark works in a database of its own (``<name>_bench_class``, dropped at the end);
give it a Redis database that no running portal uses. Run it from the repository root.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from importlib import import_module
from pathlib import Path

import django
import httpx

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
django.setup()

from django.conf import settings  # noqa: E402
from django.contrib.auth import (  # noqa: E402
    BACKEND_SESSION_KEY,
    HASH_SESSION_KEY,
    SESSION_KEY,
    get_user_model,
)
from django.contrib.auth.models import User  # noqa: E402
from django.db import connection  # noqa: E402
from django.utils import timezone  # noqa: E402

from bench.cpu import containers_cpu_s, cpu_by_process, cpu_line, machine_busy_s  # noqa: E402
from bench.flame import Profiler, python_processes, summary  # noqa: E402
from bench.students import Student, run_students  # noqa: E402
from nodeagent.runtime import home_mounts  # noqa: E402
from people.models import Course  # noqa: E402
from scheduling.choices import AuditKind  # noqa: E402
from scheduling.models import (  # noqa: E402
    AuditEvent,
    Booking,
    DesktopProfile,
    Session,
    Slice,
    WarmDesktop,
    WarmState,
)
from scheduling.services.api_tokens import issue_token  # noqa: E402
from scheduling.services.bookings import (  # noqa: E402
    check_booking,
    do_cancel_booking,
    do_create_booking,
)
from scheduling.services.nodes import do_create_join_token  # noqa: E402
from tests.integration.stack import (  # noqa: E402
    MEMORY_MB_PER_CPU,
    ROOT,
    Stack,
    database_url_of,
    docker_client,
    image_present,
    wait_for,
    write_fleet,
)

TINY_IMAGE = "deskpool/tiny:latest"
SLICES_PER_GPU = 7  # 1g.10gb MIG instances on each simulated A100
LOGS = ROOT / "test-output" / "bench-class-logs"
SessionStore = import_module(settings.SESSION_ENGINE).SessionStore


@dataclass
class ClassRun:
    """What one class start measured."""

    course: Course
    booking: Booking
    students: list[Student]
    warm_ready_at_open: int
    warm_started: int
    placed_warm: int = 0  # placed by the portal on a READY warm desktop (given its key)
    in_warm_container: int = 0  # running in that warm desktop's container (not started anew)
    # Per phase, every student's seconds: POST -> session row, -> placed, -> RUNNING stored.
    phases: dict[str, list[float]] = field(default_factory=dict)
    cpu: str = ""  # every role's CPU from the window's opening to the last answer (cpu_line)
    moves: dict[str, int] = field(default_factory=dict)  # the sessions' transitions, by state

    def times(self) -> list[float]:
        return sorted(s.elapsed for s in self.students if s.elapsed is not None)


def percentile(values: list[float], share: float) -> float:
    """Nearest-rank percentile of sorted ``values`` (share 0..1)."""
    return values[max(0, math.ceil(share * len(values)) - 1)]


def bench_profile(image: str = TINY_IMAGE) -> DesktopProfile:
    """The class's profile: one MIG slice and a small desktop of ``image``."""
    profile, _ = DesktopProfile.objects.update_or_create(
        slug="bench-class",
        defaults={
            "name": "Class benchmark",
            "image": image,
            "cpus": 0.5,
            "memory_mb": 512,
            "gpu_count": 1,
            "gpu_memory_min_mb": 4000,
            "allowed_kinds": ["mig"],
            "pids_limit": 256,
            "shm_mb": 64,
        },
    )
    return profile


def web_session(user: User) -> str:
    """A logged-in web session for ``user`` (what the login form makes), for the WebSocket."""
    store = SessionStore()
    store[SESSION_KEY] = str(user.pk)
    store[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"  # a password sign-in
    store[HASH_SESSION_KEY] = user.get_session_auth_hash()
    store.save(must_create=True)
    return store.session_key


def make_class(code: str, seats: int) -> tuple[Course, User, list[Student]]:
    """A course with one instructor and ``seats`` enrolled students (no passwords: each
    student gets an API token and a web session directly)."""
    people = get_user_model()
    course = Course.objects.create(code=code, title=f"Class of {seats}", department="cs")
    teacher = people.objects.create_user(f"{code}-prof")
    course.instructors.add(teacher)
    students = []
    for n in range(1, seats + 1):
        user = people.objects.create_user(f"{code}-s{n:02d}")
        token = issue_token(user, "bench")[1]
        students.append(Student(user=user, token=token, cookie=web_session(user)))
    course.students.add(*[s.user for s in students])
    return course, teacher, students


def start_node(stack: Stack, seats: int, workdir: Path, profile: DesktopProfile) -> None:
    """An agent on the real Docker engine with enough simulated MIG slices for ``seats``, and
    a node as large as the seats' desktops need (CPUs and memory as the profile asks: a
    32-CPU node holds only 64 desktops of half a CPU, and a larger class's warm desktops
    beyond them never start)."""
    gpus = math.ceil(seats / SLICES_PER_GPU)
    memory_cpus = math.ceil(seats * profile.memory_mb / MEMORY_MB_PER_CPU)
    cpus = max(32, math.ceil(seats * profile.cpus), memory_cpus)
    stack.start_agent(
        do_create_join_token(stack.node, actor="bench"),
        write_fleet(workdir / "fleet.yaml", stack.node, SLICES_PER_GPU, gpus, cpu_count=cpus),
    )
    wait_for(
        lambda: (
            Slice.objects.filter(
                gpu__node__hostname=stack.node,
                gpu__node__last_heartbeat__isnull=False,
                present=True,
                gpu__present=True,
            ).count()
            >= seats
        ),
        60,
        "the agent's registration, heartbeat and slices",
    )


def book(teacher: User, course: Course, profile: DesktopProfile, seats: int, opens_in_s: float):
    """The class's booking through the instructors' service; its window opens in
    ``opens_in_s`` seconds and lasts an hour."""
    starts_at = timezone.now() + timedelta(seconds=opens_in_s)
    request = check_booking(
        teacher, course.code, profile.pk, seats, starts_at, starts_at + timedelta(hours=1)
    )
    return do_create_booking(teacher, request)


def run_class(
    stack: Stack,
    profile: DesktopProfile,
    workdir: Path,
    *,
    seats: int = 40,
    code: str = "bench-class",
    opens_in_s: float = 60.0,
    spread_s: float = 1.0,
    timeout_s: float = 120.0,
    flame: Path | None = None,
) -> ClassRun:
    """Book the class, let warm desktops start, then every student asks within ``spread_s``
    of the window opening; returns when each is RUNNING, has failed, or timed out."""
    course, teacher, students = make_class(code, seats)
    start_node(stack, seats, workdir, profile)
    booking = book(teacher, course, profile, seats, opens_in_s)
    opens = time.monotonic() + (booking.starts_at - timezone.now()).total_seconds()
    body = {"profile": profile.pk, "purpose": "coursework", "course": course.code}
    asks = dict(
        cookie_name=settings.SESSION_COOKIE_NAME,
        connect_at=[time.monotonic()] * seats,
        ask_at=[opens + spread_s * n / seats for n in range(seats)],
        timeout_s=timeout_s,
    )
    # The students run in a thread of their own (one event loop), this one looks on.
    runner = threading.Thread(
        target=run_students, args=(stack.url, students, body), kwargs=asks, name="students"
    )
    runner.start()
    time.sleep(max(0.0, opens - 0.1 - time.monotonic()))
    # What the worker's cycles started (the stack has its own settings): at the opening.
    warm = WarmDesktop.objects.filter(booking=booking)
    warm_ready, warm_total = warm.filter(state=WarmState.READY).count(), warm.count()
    window_cpu = Window()
    profiler = Profiler(flame) if flame is not None else None
    if profiler is not None:
        profiler.start(python_processes())
    runner.join()
    if profiler is not None:
        profiler.stop()
    run = ClassRun(course, booking, students, warm_ready, warm_total, cpu=window_cpu.line())
    ids = [s.session_id for s in students if s.session_id]
    run.placed_warm = Session.objects.filter(pk__in=ids).exclude(warm_key="").count()
    warm_containers = {
        c.id for c in stack.node_containers(docker_client()) if c.labels.get("deskpool.warm")
    }
    run.in_warm_container = Session.objects.filter(
        pk__in=ids, container_id__in=warm_containers
    ).count()
    run.phases = phases(students)
    moves = AuditEvent.objects.filter(session_id__in=ids, kind=AuditKind.SESSION_TRANSITION)
    for target in ("PLACED", "STARTING", "RUNNING"):
        run.moves[target] = moves.filter(data__to=target).count()
    return run


class Window:
    """Every role's CPU from its making on: the stack's processes and PostgreSQL's, Docker's
    containers (the desktops), and this process (the students' clients)."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.processes = cpu_by_process()
        self.containers = containers_cpu_s()
        self.own = time.process_time()  # every thread's
        self.busy = machine_busy_s()

    def line(self) -> str:
        """The roles' CPU, then the whole machine's (the roles, the kernel's work for them
        and every other process: mount, losetup, docker-proxy, the desktops' start)."""
        busy = machine_busy_s() - self.busy
        more = {"the_students": time.process_time() - self.own}
        containers = containers_cpu_s()
        if containers is not None and self.containers is not None:
            more["desktop_containers"] = containers - self.containers
        roles = cpu_line(self.processes, cpu_by_process(), time.monotonic() - self.started, **more)
        return f"{roles}; the machine was busy {busy:.1f} s"


def phases(students: Sequence[Student]) -> dict[str, list[float]]:
    """Where each student's time went, from the session's own timestamps (same clock)."""
    sessions = Session.objects.in_bulk([s.session_id for s in students if s.session_id])
    out: dict[str, list[float]] = {"request": [], "placement": [], "desktop": [], "push": []}
    for student in students:
        row = sessions.get(student.session_id or 0)
        if row is None or row.placed_at is None or row.started_at is None:
            continue
        created, placed = row.created_at.timestamp(), row.placed_at.timestamp()
        started = row.started_at.timestamp()
        out["request"].append(created - student.submitted_wall)
        out["placement"].append(placed - created)
        out["desktop"].append(started - placed)
        if student.elapsed is not None:
            out["push"].append(student.submitted_wall + student.elapsed - started)
    return {name: sorted(values) for name, values in out.items()}


def end_class(stack: Stack, run: ClassRun, client, timeout_s: float = 90.0) -> list[str]:
    """Cancel the booking, stop every session through the API; the names of the node's
    containers still there after ``timeout_s`` (leaked; :meth:`Stack.close` removes them)."""
    teacher = run.course.instructors.get()
    do_cancel_booking(teacher, run.booking)
    for student in run.students:
        if student.session_id:
            httpx.post(
                f"{stack.url}/api/v1/sessions/{student.session_id}/stop/",
                headers={"Authorization": f"Token {student.token}"},
                timeout=30,
            )
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        left = stack.node_containers(client)
        if not left:
            return []
        time.sleep(0.5)
    return sorted(c.name for c in left)


def release_warm_homes(workdir: Path) -> None:
    """Unmount the warm desktops' home and course folders an agent left under ``workdir``
    (the deepest first), so that deleting the folder never deletes through a mount."""
    with open("/proc/self/mountinfo", encoding="utf-8") as f:
        points = {
            line.split(" ")[4] for line in f if "/warm-homes/" in line or "/warm-courses/" in line
        }
    for point in sorted(points, reverse=True):
        if point.startswith(str(workdir)):
            home_mounts.release(Path(point))


def spread(values: list[float]) -> str:
    """``p50 … s, p95 … s, max … s`` of sorted, non-empty ``values``."""
    return (
        f"p50 {statistics.median(values):.2f} s, p95 {percentile(values, 0.95):.2f} s, "
        f"max {values[-1]:.2f} s"
    )


def phase_lines(phases: dict[str, list[float]], what: dict[str, str]) -> list[str]:
    """One line per phase with values: p50, p95 and max, named by ``what``."""
    return [f"  {what[name]}: {spread(values)}" for name, values in phases.items() if values]


def report(run: ClassRun, spread_s: float) -> list[str]:
    """The figures, one line each."""
    times = run.times()
    seats = len(run.students)
    lines = [
        f"class of {seats} seats, booking {run.booking.pk}: {run.warm_ready_at_open} of "
        f"{run.warm_started} warm desktops READY when the window opened; every student "
        f"asked within {spread_s:g} s of it",
    ]
    for n, s in enumerate(run.students, 1):
        if s.elapsed is None:
            lines.append(f"student {n:2d}: session {s.session_id}: {s.error}")
        else:
            lines.append(
                f"student {n:2d}: session {s.session_id} RUNNING after {s.elapsed:.2f} s "
                f"(seen on {s.via})"
            )
    if times:
        lines.append(
            f"submit -> RUNNING over {len(times)} of {seats} students: "
            f"p50 {statistics.median(times):.2f} s, p95 {percentile(times, 0.95):.2f} s, "
            f"min {times[0]:.2f} s, max {times[-1]:.2f} s"
        )
    lines.append(
        f"placed on warm desktops: {run.placed_warm} of {seats}; running in the warm "
        f"desktop's own container: {run.in_warm_container} (the rest were started afresh)"
    )
    what = {
        "request": "POST -> session stored (the portal answering the submit)",
        "placement": "stored -> placed (scheduling cycle, warm claim)",
        "desktop": "placed -> RUNNING stored (agent poll, claim, report)",
        "push": "RUNNING stored -> seen by the student (live update)",
    }
    lines += phase_lines(run.phases, what)
    if run.moves:
        counted = ", ".join(f"{n} to {state}" for state, n in run.moves.items())
        lines.append(f"the sessions' transitions (each an audit row, a broadcast): {counted}")
    failed = [s for s in run.students if s.elapsed is None]
    if run.cpu:
        lines.append(f"from the opening to the last answer: {run.cpu}")
    if failed:
        lines.append(f"NOT RUNNING: {len(failed)} of {seats}")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seats", type=int, default=40)
    parser.add_argument("--image", default=TINY_IMAGE)
    parser.add_argument("--opens-in", type=float, default=60.0, help="seconds to the window")
    parser.add_argument("--spread", type=float, default=1.0, help="seconds the asks span")
    parser.add_argument(
        "--warm-max",
        type=int,
        help="DESKPOOL_WARM_MAX_PER_BOOKING for the stack (default: unset, every seat)",
    )
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument(
        "--flame", help="profile the stack's Python processes (py-spy) into this folder"
    )
    args = parser.parse_args()
    logging.getLogger("httpx").setLevel(logging.WARNING)
    extra_env = {}
    if args.warm_max is not None:
        extra_env["DESKPOOL_WARM_MAX_PER_BOOKING"] = str(args.warm_max)
    client = docker_client()
    if client is None or not image_present(client, args.image):
        raise SystemExit(f"needs a Docker engine and {args.image} (make images)")
    if connection.vendor != "postgresql":
        raise SystemExit("the benchmark needs PostgreSQL and Redis: set DATABASE_URL, REDIS_URL")
    started = time.monotonic()
    original = connection.settings_dict["NAME"]
    connection.settings_dict["TEST"]["NAME"] = f"{original}_bench_class"
    connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    load = ", ".join(f"{n:.1f}" for n in os.getloadavg())
    print(
        f"bench_class: {args.seats} seats, database {connection.settings_dict['NAME']}, "
        f"warm max {args.warm_max if args.warm_max is not None else 'every seat'}; "
        f"{os.cpu_count()} CPUs, load average {load}"
    )
    failed = True
    try:
        with tempfile.TemporaryDirectory(prefix="bench-class-") as tmp:
            workdir = Path(tmp)
            stack = Stack(
                workdir,
                database_url_of(connection.settings_dict),
                settings.REDIS_URL,
                node="bench-class-node",
                extra_env=extra_env,
            )
            stack.remove_volumes = True
            try:
                stack.start_portal_and_worker()
                run = run_class(
                    stack,
                    bench_profile(args.image),
                    workdir,
                    seats=args.seats,
                    opens_in_s=args.opens_in,
                    spread_s=args.spread,
                    timeout_s=args.timeout,
                    flame=Path(args.flame) if args.flame else None,
                )
                print(*report(run, args.spread), sep="\n")
                if args.flame:
                    print(*summary(Path(args.flame)), sep="\n")
                ending = time.monotonic()
                # The agent stops a class's desktops a few at a time: 200 take minutes here.
                leaked = end_class(stack, run, client, timeout_s=max(90.0, 0.75 * args.seats))
                print(
                    f"containers left after the class ended: {leaked or 'none'} "
                    f"({time.monotonic() - ending:.0f} s after the stops were asked for)"
                )
                failed = bool(leaked) or len(run.times()) < args.seats
            finally:
                stack.close(client)
                release_warm_homes(workdir)
                shutil.rmtree(LOGS, ignore_errors=True)
                shutil.copytree(stack.logs, LOGS)
                print(f"the stack's logs: {LOGS.relative_to(ROOT)}/")
                if failed:
                    for name in ["portal", "worker", "agent"]:
                        print(f"--- {name} log ---\n{stack.log_tail(name, 20)}")
    finally:
        connection.creation.destroy_test_db(original, verbosity=0)
    print(f"({time.monotonic() - started:.0f} s for the whole run)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
