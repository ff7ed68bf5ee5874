"""A real Deskpool on this machine for one test: ASGI portal, Celery worker, node agent.

Every part is a real process on the real PostgreSQL test database and the real Redis;
the agent drives the real Docker engine. Only the GPUs are a SIMULATED fleet file.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import suppress
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def docker_client():
    """The Docker client, or None when no engine answers."""
    try:
        import docker

        client = docker.from_env(timeout=10)
        client.ping()
        return client
    except Exception:
        return None


def image_present(client, image: str) -> bool:
    import docker

    try:
        client.images.get(image)
        return True
    except docker.errors.ImageNotFound:
        return False


def wait_for(predicate, timeout: float, what: str):
    """Poll ``predicate`` until it returns something true; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def write_fleet(path: Path, node: str, mig_instances: int) -> Path:
    fleet = {
        "simulated": True,
        "nodes": [
            {
                "name": node,
                "cpu_count": 32,
                "memory_mb": 131072,
                "labels": {"rack": "test", "network_plane": "eth0"},
                "gpus": [
                    {
                        "count": 1,
                        "name": "NVIDIA A100-SXM4-80GB",
                        "memory_mb": 81920,
                        "compute_capability": "8.0",
                        "sharing": "mig",
                        "mig_instances": [{"profile": "1g.10gb", "memory_mb": 9984}]
                        * mig_instances,
                    }
                ],
            }
        ],
    }
    path.write_text(yaml.safe_dump(fleet))
    return path


class Stack:
    """Starts the processes; ``close()`` stops them and removes this node's containers."""

    def __init__(self, workdir: Path, database_url: str, redis_url: str, node: str = "it-node"):
        self.workdir = workdir
        self.node = node
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.logs = workdir / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.env = {
            **os.environ,
            "DATABASE_URL": database_url,
            "REDIS_URL": redis_url,
            "DESKPOOL_VAR_DIR": str(workdir / "var"),
            "PYTHONUNBUFFERED": "1",
            "DESKPOOL_AGENT_POLL_INTERVAL_S": "0.25",
        }
        self.processes: dict[str, subprocess.Popen] = {}
        self.agent_env: dict[str, str] = {}

    def _spawn(self, name: str, argv: list[str], **env: str) -> subprocess.Popen:
        log = open(self.logs / f"{name}.log", "ab")  # noqa: SIM115 - closed with the process
        process = subprocess.Popen(
            argv,
            cwd=ROOT,
            env={**self.env, **env},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.processes[name] = process
        return process

    def start_portal_and_worker(self) -> None:
        python = sys.executable
        self._spawn(
            "portal",
            [
                python,
                "-m",
                "daphne",
                "-b",
                "127.0.0.1",
                "-p",
                str(self.port),
                "portal.asgi:application",
            ],
        )
        self._spawn(
            "worker",
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
                "2",
                "--loglevel",
                "INFO",
            ],
        )
        self.wait_http("/login/")

    def start_agent(self, join_token: str | None, fleet: Path, runtime: str = "docker") -> None:
        self.agent_env = {
            "DESKPOOL_PORTAL_URL": self.url,
            "DESKPOOL_NODE_NAME": self.node,
            "DESKPOOL_STATE_DIR": str(self.workdir / "agent-state"),
            "DESKPOOL_FLEET_FILE": str(fleet),
            "DESKPOOL_RUNTIME": runtime,
            "DESKPOOL_POLL_INTERVAL": "0.25",
        }
        if join_token:
            self.agent_env["DESKPOOL_JOIN_TOKEN"] = join_token
        self._spawn("agent", [sys.executable, "-m", "nodeagent", "-v"], **self.agent_env)

    def wait_http(self, path: str, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, process in self.processes.items():
                if process.poll() is not None:
                    raise RuntimeError(f"{name} exited early:\n{self.log_tail(name)}")
            with suppress(OSError), urllib.request.urlopen(self.url + path, timeout=2):
                return
            time.sleep(0.2)
        raise TimeoutError(f"{self.url}{path} did not answer in {timeout} s")

    def log_tail(self, name: str, lines: int = 40) -> str:
        path = self.logs / f"{name}.log"
        if not path.exists():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self, name: str, sig: int = signal.SIGTERM, timeout: float = 20.0) -> None:
        process = self.processes.pop(name, None)
        if process is None or process.poll() is not None:
            return
        process.send_signal(sig)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def node_containers(self, client, *, all_states: bool = True) -> list:
        return client.containers.list(
            all=all_states, filters={"label": f"deskpool.node={self.node}"}
        )

    def close(self, client=None) -> None:
        for name in ["agent", "worker", "portal"]:
            self.stop(name)
        if client is not None:
            for container in self.node_containers(client):
                with suppress(Exception):
                    container.remove(force=True)
