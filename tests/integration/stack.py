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

from nodeagent.runtime import home_images
from nodeagent.runtime.desktop_network import remove_networks

ROOT = Path(__file__).resolve().parents[2]
# The portal's ASGI worker as deployed: daphne with flow control (portal.server.daphne_worker).
ASGI_WORKER = [sys.executable, "-m", "portal.server.daphne_worker"]


def shared_secret_key() -> dict[str, str]:
    """The test process's secret key for the processes it starts (their var/ is their own),
    so a login session made here is valid there: the file it was generated into."""
    if os.environ.get("SECRET_KEY") or os.environ.get("SECRET_KEY_FILE"):
        return {}
    from django.conf import settings

    from portal.server.hardening import SECRET_KEY_FILE_NAME

    key_file = Path(settings.VAR_DIR) / SECRET_KEY_FILE_NAME
    return {"SECRET_KEY_FILE": str(key_file)} if key_file.exists() else {}


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


def database_url_of(settings_dict: dict) -> str:
    """A ``postgres://`` URL for a Django database's settings (for the stack's processes)."""
    s = settings_dict
    password = f":{s['PASSWORD']}" if s.get("PASSWORD") else ""
    host = f"{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}"
    return f"postgres://{s['USER']}{password}@{host}/{s['NAME']}"


# A simulated fleet file's node has this much memory per CPU.
MEMORY_MB_PER_CPU = 4096


def write_fleet(
    path: Path, node: str, mig_instances: int, gpus: int = 1, *, cpu_count: int = 32
) -> Path:
    """A simulated fleet file: ``node`` with ``gpus`` A100s of ``mig_instances`` 1g.10gb each,
    ``cpu_count`` CPUs and :data:`MEMORY_MB_PER_CPU` of memory each."""
    fleet = {
        "simulated": True,
        "nodes": [
            {
                "name": node,
                "cpu_count": cpu_count,
                "memory_mb": cpu_count * MEMORY_MB_PER_CPU,
                "labels": {"rack": "test", "network_plane": "eth0"},
                "gpus": [
                    {
                        "count": gpus,
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

    def __init__(
        self,
        workdir: Path,
        database_url: str,
        redis_url: str,
        node: str = "it-node",
        extra_env: dict[str, str] | None = None,
    ):
        self.workdir = workdir
        self.node = node
        self.nodes = {node}
        # Also remove the home volumes of this stack's nodes on close (fault tests).
        self.remove_volumes = False
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
            # The page origin the nodes' gateways let in: this portal's, on its free port.
            "DESKPOOL_GATEWAY_ORIGINS": self.url,
            **shared_secret_key(),
            **(extra_env or {}),
        }
        self.processes: dict[str, subprocess.Popen] = {}
        self.agent_env: dict[str, str] = {}
        self.agent_envs: dict[str, dict[str, str]] = {}

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
        self.start_portal(wait=False)
        self.start_worker()
        self.wait_http("/login/")

    def start_portal(self, *, wait: bool = True) -> None:
        """The ASGI portal (daphne) on :attr:`port`; the same port every time."""
        self._spawn(
            "portal",
            [
                *ASGI_WORKER,
                "-b",
                "127.0.0.1",
                "-p",
                str(self.port),
                "portal.asgi:application",
            ],
        )
        if wait:
            self.wait_http("/login/")

    def restart_portal(self, down_s: float = 0.0) -> None:
        """Stop daphne, leave it down for ``down_s`` seconds, start it on the same port."""
        self.stop("portal")
        time.sleep(down_s)
        self.start_portal()

    def start_worker(self) -> None:
        self._spawn(
            "worker",
            [
                sys.executable,
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

    def start_agent(
        self,
        join_token: str | None,
        fleet: Path,
        runtime: str = "docker",
        *,
        node: str | None = None,
        name: str = "agent",
    ) -> None:
        """An agent process ``name`` for ``node`` (default: this stack's node)."""
        node = node or self.node
        self.nodes.add(node)
        env = {
            "DESKPOOL_PORTAL_URL": self.url,
            "DESKPOOL_NODE_NAME": node,
            "DESKPOOL_STATE_DIR": str(self.workdir / "agent-state"),
            "DESKPOOL_FLEET_FILE": str(fleet),
            "DESKPOOL_RUNTIME": runtime,
            "DESKPOOL_POLL_INTERVAL": "0.25",
        }
        if join_token:
            env["DESKPOOL_JOIN_TOKEN"] = join_token
        self.agent_envs[name] = env
        if name == "agent":
            self.agent_env = env
        self._spawn(name, [sys.executable, "-m", "nodeagent", "-v"], **env)

    def restart_agent(self, name: str = "agent") -> None:
        """Start agent ``name`` again with the same state dir and no join token: it must
        register with the credential it stored the first time."""
        self.stop(name)
        env = {k: v for k, v in self.agent_envs[name].items() if k != "DESKPOOL_JOIN_TOKEN"}
        self._spawn(name, [sys.executable, "-m", "nodeagent", "-v"], **env)

    def send_signal(self, name: str, sig: int) -> None:
        """Send ``sig`` to process ``name`` and return at once (e.g. SIGSTOP, SIGCONT)."""
        self.processes[name].send_signal(sig)

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
        with suppress(OSError):
            process.send_signal(signal.SIGCONT)  # a SIGSTOPped process handles sig only now
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def node_containers(self, client, *, all_states: bool = True, node: str | None = None) -> list:
        import docker

        for _ in range(10):
            try:
                return client.containers.list(
                    all=all_states, filters={"label": f"deskpool.node={node or self.node}"}
                )
            except docker.errors.NotFound:
                time.sleep(0.05)  # one was removed between listing and inspecting it
        raise AssertionError("containers keep vanishing while being listed")

    def close(self, client=None) -> None:
        for name in [n for n in self.processes if n not in ("worker", "portal")]:
            self.stop(name)
        for name in ["worker", "portal"]:
            self.stop(name)
        if client is not None:
            for node in sorted(self.nodes):
                for container in self.node_containers(client, node=node):
                    with suppress(Exception):
                        container.remove(force=True)
                if self.remove_volumes:
                    for volume in client.volumes.list(filters={"label": f"deskpool.node={node}"}):
                        with suppress(Exception):
                            volume.remove(force=True)
                with suppress(Exception):  # the node's desktop network (nodeagent.runtime)
                    remove_networks(client, node)
        # The agents' home images (nodeagent.runtime.home_images) stay mounted while an agent
        # runs: unmounted here, so that no loop device outlives the stack and nothing deletes
        # through a mount.
        home_images.release_all(self.workdir / "agent-state")
