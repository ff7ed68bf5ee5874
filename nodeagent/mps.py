"""One CUDA MPS control daemon per shared GPU: started, watched, restarted, and its health.

A GPU in share mode (``DESKPOOL_GPU_SHARES``) gets its own control daemon, started with
``nvidia-cuda-mps-control -d`` and ``CUDA_VISIBLE_DEVICES`` set to that GPU only, its pipe and
log directories under the agent's state folder (``mps/<node>/<uuid>/``). Once it runs, the
supervisor sets the daemon's defaults for every client (``set_default_device_pinned_mem_limit``
and ``set_default_active_thread_percentage``), so a desktop that drops the variables from its
environment still gets the caps. The daemon spawns its MPS server with the uid of the client
(the desktops' uid 1000), which is why the pipe and log directories belong to that uid.

Clients and server also meet in ``/dev/shm``: each shared GPU has a tmpfs (``<uuid>/shm``)
that is the daemon's ``/dev/shm`` (a mount namespace of its own) and its desktops'.

The agent looks at each daemon at every heartbeat (:meth:`MpsSupervisor.check`): a dead one is
started again, a running one gets its caps set again (a client can reach the control socket).
A share desktop starts only while its GPU's daemon is healthy
(:meth:`MpsSupervisor.client`); otherwise the start fails with a sentence, and where MPS is not
available at all the probe reports the GPU whole (docs/mig.md, docs/security.md).
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nodeagent.config import MPS_CONTROL_PROGRAM, AgentConfig, GpuShares
from nodeagent.protocol import DESKTOP_GID, DESKTOP_UID

logger = logging.getLogger(__name__)

PID_FILE = "nvidia-cuda-mps-control.pid"  # the daemon writes it into its pipe directory
# Where a share desktop sees its GPU's pipe directory (mounted read-only).
CLIENT_PIPE_DIRECTORY = "/run/deskpool/mps"
# MPS clients and their server meet in /dev/shm too (the path is fixed: cuda.shm.*), so the
# daemon (in a mount namespace of its own) and the GPU's share desktops see one tmpfs there,
# of this size per share; it counts against the memory limit of the desktop that fills it.
SHM_MOUNT = "/dev/shm"
SHM_MB_PER_SHARE = 1024
_COMMAND_TIMEOUT_S = 20.0
# How long a daemon started with -d (which forks and returns) may take to write its pid file.
_PID_FILE_WAIT_S = 5.0
_PID_FILE_POLL_S = 0.05

Runner = Callable[..., subprocess.CompletedProcess[str]]


class MpsUnavailable(RuntimeError):
    """A share cannot be handed out: the sentence says why."""


@dataclass(frozen=True)
class MpsHealth:
    """A shared GPU's daemon as last seen: running with its caps set, or why not."""

    ok: bool
    reason: str
    restarts: int = 0

    def text(self) -> str:
        """One line for the heartbeat (and the console's pool page)."""
        restarts = f"; restarted {self.restarts}×" if self.restarts else ""
        return f"{self.reason}{restarts}"[:200]


@dataclass(frozen=True)
class ShareClient:
    """What a share desktop of one GPU gets: its environment and the pipe folder to mount."""

    pipe_dir: Path
    shm_dir: Path
    environment: dict[str, str]


@dataclass
class _Daemon:
    uuid: str
    shares: GpuShares
    folder: Path
    health: MpsHealth
    started: bool = False

    @property
    def pipe_dir(self) -> Path:
        return self.folder / "pipe"

    @property
    def log_dir(self) -> Path:
        return self.folder / "log"

    @property
    def shm_dir(self) -> Path:
        return self.folder / "shm"


def client_environment(shares: GpuShares) -> dict[str, str]:
    """The MPS variables of a share desktop: its pipe directory, memory cap and SM share.
    Inside the desktop the GPU is device 0 (NVIDIA_VISIBLE_DEVICES names only it)."""
    return {
        "CUDA_MPS_PIPE_DIRECTORY": CLIENT_PIPE_DIRECTORY,
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": f"0={shares.memory_mb}M",
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(shares.thread_percentage),
    }


def cap_commands(shares: GpuShares) -> str:
    """The control daemon's defaults for every client of its (only, device 0) GPU."""
    return (
        f"set_default_device_pinned_mem_limit 0 {shares.memory_mb}M\n"
        f"set_default_active_thread_percentage {shares.thread_percentage}\n"
    )


class MpsSupervisor:
    """The control daemons of a node's shared GPUs."""

    def __init__(
        self,
        root: Path,
        program: str = MPS_CONTROL_PROGRAM,
        *,
        private_shm: bool = True,
        run: Runner = subprocess.run,
    ) -> None:
        self.root = root
        self.program = program
        # The daemon's /dev/shm: the GPU's tmpfs, in a mount namespace of its own (root
        # only: without it the daemon's is the host's, which no desktop may be given).
        self.private_shm = private_shm
        self._run = run
        self._daemons: dict[str, _Daemon] = {}
        # The GPUs the portal was told are shares (at the last inventory): their desktops
        # start only as capped MPS clients.
        self.offered: frozenset[str] = frozenset()

    @classmethod
    def from_config(cls, config: AgentConfig) -> MpsSupervisor | None:
        """A supervisor where the node's admin put GPUs in share mode; None otherwise."""
        if not config.gpu_shares:
            return None
        return cls(config.mps_dir(), config.mps_control, private_shm=os.geteuid() == 0)

    def unavailable(self) -> str | None:
        """Why MPS cannot run on this node at all (no control program); None when it can."""
        if shutil.which(self.program) is None:
            return (
                f"MPS is not available: {self.program} is not installed (it comes with the "
                "NVIDIA driver's compute utilities): GPUs are offered whole"
            )
        return None

    # -- daemons -------------------------------------------------------------------------

    def ensure(self, gpus: Mapping[str, GpuShares]) -> dict[str, MpsHealth]:
        """Run one capped daemon for each of these GPUs (UUID -> shares); their health."""
        for uuid, shares in gpus.items():
            daemon = self._daemons.get(uuid)
            if daemon is None or daemon.shares != shares:
                folder = self.root / uuid
                daemon = _Daemon(uuid, shares, folder, MpsHealth(False, "not started yet"))
                self._daemons[uuid] = daemon
        return self.check()

    def check(self) -> dict[str, MpsHealth]:
        """Look at every daemon (each heartbeat): start a dead one again, set a running
        one's caps again."""
        why_not = self.unavailable()
        for daemon in self._daemons.values():
            self._look(daemon, why_not)
        return self.health()

    def _look(self, daemon: _Daemon, why_not: str | None) -> None:
        if why_not is not None:
            daemon.health = MpsHealth(False, why_not, daemon.health.restarts)
        elif self._alive(daemon) is None:
            self._start(daemon)
        else:
            # Found running (a previous agent's), or running: its caps set again each time,
            # since a client can reach the control socket (docs/security.md).
            self._start(daemon, running=True)

    def health(self) -> dict[str, MpsHealth]:
        """Each shared GPU's health as last seen (by UUID)."""
        return {uuid: daemon.health for uuid, daemon in self._daemons.items()}

    def offer(self, uuids: Sequence[str]) -> None:
        """Remember which GPUs the inventory offers as shares (the others are whole)."""
        self.offered = frozenset(uuids)

    def client_of(self, devices: Sequence[str]) -> ShareClient | None:
        """A desktop's MPS settings where its GPU is offered as shares; None for a whole GPU
        or a MIG instance; MpsUnavailable when the share's daemon is not healthy."""
        shared = [uuid for uuid in devices if uuid in self.offered]
        if not shared:
            return None
        if len(devices) != 1:
            raise MpsUnavailable("a share desktop gets exactly one GPU, not several")
        return self.client(shared[0])

    def client(self, uuid: str) -> ShareClient:
        """What a share desktop of GPU ``uuid`` gets, or MpsUnavailable (never an uncapped
        share): the daemon is looked at now (started again, or its caps set again), not only
        at the last heartbeat."""
        daemon = self._daemons.get(uuid)
        if daemon is None:
            raise MpsUnavailable(f"GPU {uuid} is not in share mode on this node")
        self._look(daemon, self.unavailable())  # and its caps set again
        if not daemon.health.ok:
            raise MpsUnavailable(
                f"GPU {uuid} cannot be shared now: its MPS control daemon is not healthy "
                f"({daemon.health.reason}); no desktop gets an uncapped share"
            )
        return ShareClient(daemon.pipe_dir, daemon.shm_dir, client_environment(daemon.shares))

    def quit_all(self) -> None:
        """Ask each daemon to quit (its server ends once its clients are gone). The agent
        does not when it stops: its share desktops keep running, and a restarted agent
        adopts the daemons it finds running (their caps set again)."""
        for daemon in self._daemons.values():
            if self._alive(daemon) is not None:
                self._command(daemon, "quit\n")

    # -- one daemon ----------------------------------------------------------------------

    def _environment(self, daemon: _Daemon) -> dict[str, str]:
        return {
            **os.environ,
            "CUDA_VISIBLE_DEVICES": daemon.uuid,
            "CUDA_MPS_PIPE_DIRECTORY": str(daemon.pipe_dir),
            "CUDA_MPS_LOG_DIRECTORY": str(daemon.log_dir),
        }

    def _start(self, daemon: _Daemon, *, running: bool = False) -> None:
        """Start the daemon (``running``: adopt one found running) and set its caps."""
        restarts = daemon.health.restarts + (1 if daemon.started and not running else 0)
        if daemon.started and not running:
            logger.warning("MPS control daemon of GPU %s is gone: starting it again", daemon.uuid)
        was_ok = daemon.health.ok
        try:
            _prepare_folders(daemon)
            if self.private_shm:
                self._mount_shm(daemon)
            if not running:
                answer = self._start_daemon(daemon)
                if answer.returncode != 0:
                    raise MpsUnavailable(f"{self.program} -d failed: {_output(answer)}")
                if self._await_pid(daemon) is None:
                    raise MpsUnavailable(f"{self.program} -d started no daemon")
            caps = self._command(daemon, cap_commands(daemon.shares))
            if caps.returncode != 0 or "error" in _output(caps).lower():
                self._command(daemon, "quit\n")  # running without its caps: never offered
                raise MpsUnavailable(f"the caps were refused: {_output(caps)}")
        except (OSError, subprocess.SubprocessError, MpsUnavailable) as error:
            logger.error("MPS on GPU %s: %s", daemon.uuid, error)
            daemon.health = MpsHealth(False, f"MPS control daemon not running: {error}", restarts)
            return
        daemon.started = True
        shares = daemon.shares
        daemon.health = MpsHealth(
            True,
            f"MPS running: {shares.count} shares of {shares.memory_mb} MB, "
            f"{shares.thread_percentage}% of the SMs each",
            restarts,
        )
        if not was_ok:
            logger.info("MPS on GPU %s: %s", daemon.uuid, daemon.health.text())

    def _mount_shm(self, daemon: _Daemon) -> None:
        """A tmpfs on the GPU's shm folder, unless one is there (a previous agent's)."""
        if os.path.ismount(daemon.shm_dir):
            return
        size = daemon.shares.count * SHM_MB_PER_SHARE
        done = self._run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}m,mode=1777,nosuid,nodev"]
            + ["tmpfs", str(daemon.shm_dir)],
            capture_output=True,
            text=True,
            timeout=_COMMAND_TIMEOUT_S,
            check=False,
        )
        if done.returncode != 0:
            raise MpsUnavailable(f"cannot mount its shm folder: {_output(done)}")

    def _start_daemon(self, daemon: _Daemon) -> subprocess.CompletedProcess[str]:
        """``-d``; with a private shm in a mount namespace whose /dev/shm is the GPU's
        folder (the servers it spawns inherit it)."""
        if not self.private_shm:
            return self._invoke(daemon, ["-d"], "")
        # umask 022: the agent's unit runs with 0077, and the desktops' uid must reach the
        # daemon's sockets.
        script = 'umask 022 && mount --bind "$1" "$2" && exec "$3" -d'
        shell = ["sh", "-c", script, "sh", str(daemon.shm_dir), SHM_MOUNT, self.program]
        namespace = ["unshare", "--mount", "--propagation", "private"]
        return self._invoke(daemon, [], "", [*namespace, *shell])

    def _alive(self, daemon: _Daemon) -> int | None:
        """The daemon's pid while it runs (its pid file names a live control program)."""
        try:
            pid = int((daemon.pipe_dir / PID_FILE).read_text().strip())
            os.kill(pid, 0)
            command_line = Path(f"/proc/{pid}/cmdline").read_bytes()
        except (OSError, ValueError):
            return None
        # A pid file left by a daemon that died names a pid another program may now hold.
        if Path(self.program).name.encode() not in command_line:
            return None
        return pid

    def _await_pid(self, daemon: _Daemon) -> int | None:
        deadline = time.monotonic() + _PID_FILE_WAIT_S
        while (pid := self._alive(daemon)) is None and time.monotonic() < deadline:
            time.sleep(_PID_FILE_POLL_S)
        return pid

    def _command(self, daemon: _Daemon, commands: str) -> subprocess.CompletedProcess[str]:
        """Send commands to the daemon on its control pipe (the program without -d)."""
        try:
            return self._invoke(daemon, [], commands)
        except (OSError, subprocess.SubprocessError) as error:
            return subprocess.CompletedProcess([self.program], 1, "", str(error))

    def _invoke(
        self, daemon: _Daemon, args: list[str], stdin: str, command: list[str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        return self._run(
            command or [self.program, *args],
            input=stdin,
            env=self._environment(daemon),
            capture_output=True,
            text=True,
            timeout=_COMMAND_TIMEOUT_S,
            check=False,
        )


def _prepare_folders(daemon: _Daemon) -> None:
    """The pipe and log folders: the desktops' uid's (its MPS server writes there), 0700,
    the rest of the host kept out; share desktops mount the pipe folder read-only."""
    for folder in (daemon.folder, daemon.pipe_dir, daemon.log_dir, daemon.shm_dir):
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    if not os.path.ismount(daemon.shm_dir):
        os.chmod(daemon.shm_dir, 0o1777)  # as /dev/shm (a tmpfs is mounted so where root)
    for folder in (daemon.pipe_dir, daemon.log_dir):
        if os.geteuid() == 0:
            os.chown(folder, DESKTOP_UID, DESKTOP_GID)
        os.chmod(folder, 0o700)
    os.chmod(daemon.folder, 0o711)  # traversable by the server's uid, not listable


def _output(answer: subprocess.CompletedProcess[Any]) -> str:
    text = f"{answer.stdout or ''} {answer.stderr or ''}".strip()
    return text[:200] or f"exit status {answer.returncode}"
