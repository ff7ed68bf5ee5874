"""A SIMULATED runtime for machines without a Docker engine: no containers run.

Sessions "start" after a short pause and are reported RUNNING with no port, so the
portal's queue, placement and lifecycle can be exercised end to end; a user gets no
real desktop. State is kept in a JSON file under the state directory so an agent
restart adopts its simulated sessions just as it adopts real containers.

Usage figures for idle detection are SIMULATED too: a session's GPU and CPU use is
:data:`SIMULATED_USAGE` (an idle desktop) unless set with :meth:`SimulatedRuntime.set_usage`
or in the usage file (:func:`usage_file`: ``{"<session id>": [gpu %, cpu %]}``, read at every
heartbeat, so a test or a demo can make a session's GPU busy or idle from outside the agent).

Homes are SIMULATED as well: the Files page's home tasks work on plain folders,
``<state dir>/simulated-homes/<home volume>`` (:meth:`SimulatedRuntime.home_folder`; a
temporary folder without a state file), which no desktop ever mounts.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, replace
from pathlib import Path

from nodeagent.config import AgentConfig
from nodeagent.protocol import (
    DESKTOP_GID,
    DESKTOP_UID,
    DesiredSession,
    DesiredWarm,
    RuntimeKind,
    SessionUsage,
)
from nodeagent.runtime.base import (
    ManagedContainer,
    StartFailed,
    WarmContainer,
    home_folder_name,
)

logger = logging.getLogger(__name__)

SIMULATED_STATUS = "running (simulated, no container)"
# A simulated desktop nobody set figures for: an idle GPU, a nearly idle CPU (SIMULATED).
SIMULATED_USAGE = (0.0, 1.0)


def usage_file(state_dir: Path, node_name: str) -> Path:
    """Where a simulated node's usage figures are set (the module's docstring)."""
    return state_dir / f"simulated-usage-{node_name}.json"


class SimulatedRuntime:
    """Same interface as DockerRuntime; bookkeeping only."""

    kind: RuntimeKind = "simulated"

    def __init__(
        self,
        *,
        node_name: str,
        publish_address: str = "127.0.0.1",
        state_file: Path | None = None,
        start_delay_s: float = 0.2,
        known_images: set[str] | None = None,
        homes_dir: Path | None = None,
    ) -> None:
        self._node = node_name
        self._publish_address = publish_address
        self._state_file = state_file
        # Usage figures live beside the state file; without one (tests), in memory only.
        self._usage_file = (
            usage_file(state_file.parent, node_name) if state_file is not None else None
        )
        self._usage: dict[int, tuple[float | None, float | None]] = {}
        self.start_delay_s = start_delay_s
        # None: every image "exists"; a set lets tests simulate a missing image.
        self._known_images = known_images
        self._lock = threading.Lock()
        self._containers: dict[int, ManagedContainer] = self._load()
        # SIMULATED warm desktops, in memory only: a restarted agent starts them afresh.
        self._warm: dict[str, WarmContainer] = {}
        # SIMULATED homes: plain folders (the module's docstring).
        if homes_dir is None and state_file is not None:
            homes_dir = state_file.parent / "simulated-homes"
        self._homes_dir = homes_dir

    @classmethod
    def from_config(cls, config: AgentConfig) -> SimulatedRuntime:
        state_file = config.state_dir.resolve() / f"simulated-{config.node_name}.json"
        return cls(
            node_name=config.node_name,
            publish_address=config.publish_address,
            state_file=state_file,
        )

    def list_managed(self) -> list[ManagedContainer]:
        with self._lock:
            return list(self._containers.values())

    def start(self, session: DesiredSession) -> ManagedContainer:
        if self._known_images is not None and session.image not in self._known_images:
            raise StartFailed(f"image {session.image} is not present on node {self._node}")
        time.sleep(self.start_delay_s)
        session_id = session.session_id
        container = ManagedContainer(
            session_id=session_id,
            container_id=f"simulated-{self._node}-s{session_id}",
            running=True,
            status=SIMULATED_STATUS,
            host=self._publish_address,
            port=None,
            simulated=True,
            placement=session.placement,
        )
        with self._lock:
            self._containers[session_id] = container
            self._save()
        logger.info("session %s: SIMULATED desktop started (no container)", session_id)
        return container

    def stop(self, session_id: int) -> None:
        with self._lock:
            self._containers.pop(session_id, None)
            self._save()

    def usage(self, containers: Sequence[ManagedContainer]) -> list[SessionUsage]:
        """SIMULATED figures for each running desktop (the module's docstring)."""
        figures = {**self._usage, **self._read_usage_file()}
        return [
            SessionUsage(
                session_id=container.session_id,
                gpu_pct=figures.get(container.session_id, SIMULATED_USAGE)[0],
                cpu_pct=figures.get(container.session_id, SIMULATED_USAGE)[1],
            )
            for container in containers
            if container.running
        ]

    def set_usage(self, session_id: int, gpu_pct: float | None, cpu_pct: float | None) -> None:
        """Make a simulated session's GPU (and CPU) busy or idle, in percent (None: unknown)."""
        with self._lock:
            self._usage[session_id] = (gpu_pct, cpu_pct)
            if self._usage_file is not None:
                rows = {str(key): list(value) for key, value in self._usage.items()}
                self._usage_file.parent.mkdir(parents=True, exist_ok=True)
                temporary = self._usage_file.with_suffix(".tmp")
                temporary.write_text(json.dumps({**self._file_rows(), **rows}))
                temporary.replace(self._usage_file)

    def _file_rows(self) -> dict[str, list]:
        if self._usage_file is None or not self._usage_file.exists():
            return {}
        try:
            rows = json.loads(self._usage_file.read_text())
        except (OSError, ValueError) as error:
            logger.warning("ignoring unreadable usage file %s: %s", self._usage_file, error)
            return {}
        return rows if isinstance(rows, dict) else {}

    def _read_usage_file(self) -> dict[int, tuple[float | None, float | None]]:
        figures = {}
        for key, value in self._file_rows().items():
            try:
                gpu, cpu = (None if v is None else min(100.0, max(0.0, float(v))) for v in value)
                figures[int(key)] = (gpu, cpu)
            except (TypeError, ValueError):
                logger.warning("ignoring usage %r: %r in %s", key, value, self._usage_file)
        return figures

    def list_warm(self) -> list[WarmContainer]:
        with self._lock:
            return list(self._warm.values())

    def start_warm(self, warm: DesiredWarm) -> WarmContainer:
        if self._known_images is not None and warm.image not in self._known_images:
            raise StartFailed(f"image {warm.image} is not present on node {self._node}")
        time.sleep(self.start_delay_s)
        container = WarmContainer(
            key=warm.key,
            container_id=f"simulated-{self._node}-w{warm.key}",
            running=True,
            status=SIMULATED_STATUS,
            port=None,
            booking=str(warm.booking),
        )
        with self._lock:
            self._warm[warm.key] = container
        return container

    def claim(self, key: str, session: DesiredSession) -> ManagedContainer:
        with self._lock:
            warm = self._warm.pop(key, None)
            if warm is None:
                raise StartFailed(f"warm desktop {key} is not running (SIMULATED)")
            session_id = session.session_id
            container = ManagedContainer(
                session_id=session_id,
                container_id=warm.container_id,
                running=True,
                status=SIMULATED_STATUS,
                host=self._publish_address,
                port=None,
                simulated=True,
                placement=session.placement,
            )
            self._containers[session_id] = container
            self._save()
        return container

    def stop_warm(self, key: str) -> None:
        with self._lock:
            self._warm.pop(key, None)

    def home_folder(self, home_volume: str, *, create: bool) -> Path | None:
        """A SIMULATED home: the folder ``<homes>/<home_volume>`` (made, 0700, with
        ``create``; owned by the desktop user when the agent runs as root)."""
        home_folder_name(home_volume)
        with self._lock:
            if self._homes_dir is None:
                self._homes_dir = Path(tempfile.mkdtemp(prefix="deskpool-simulated-homes-"))
            folder = self._homes_dir / home_volume
        if folder.is_dir():
            return folder
        if not create:
            return None
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        if os.geteuid() == 0:
            os.chown(folder, DESKTOP_UID, DESKTOP_GID)
        return folder

    def simulate_exit(self, session_id: int, exit_code: int, *, oom_killed: bool = False) -> None:
        """Pretend the desktop died (for tests and demos of LOST sessions)."""
        with self._lock:
            container = self._containers[session_id]
            self._containers[session_id] = replace(
                container,
                running=False,
                status="exited",
                exit_code=exit_code,
                oom_killed=oom_killed,
            )
            self._save()

    def _load(self) -> dict[int, ManagedContainer]:
        if self._state_file is None or not self._state_file.exists():
            return {}
        try:
            rows = json.loads(self._state_file.read_text())
            return {int(row["session_id"]): ManagedContainer(**row) for row in rows}
        except (OSError, ValueError, TypeError, KeyError) as error:
            logger.warning("ignoring unreadable simulated state %s: %s", self._state_file, error)
            return {}

    def _save(self) -> None:
        if self._state_file is None:
            return
        self._state_file.parent.mkdir(parents=True, exist_ok=True)
        rows = [asdict(container) for container in self._containers.values()]
        temporary = self._state_file.with_suffix(".tmp")
        temporary.write_text(json.dumps(rows, indent=1))
        temporary.replace(self._state_file)
