"""A SIMULATED runtime for machines without a Docker engine: no containers run.

Sessions "start" after a short pause and are reported RUNNING with no port, so the
portal's queue, placement and lifecycle can be exercised end to end; a user gets no
real desktop. State is kept in a JSON file under the state directory so an agent
restart adopts its simulated sessions just as it adopts real containers.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import asdict, replace
from pathlib import Path

from nodeagent.config import AgentConfig
from nodeagent.protocol import DesiredSession, DesiredWarm, RuntimeKind
from nodeagent.runtime.base import ManagedContainer, StartFailed, WarmContainer

logger = logging.getLogger(__name__)

SIMULATED_STATUS = "running (simulated, no container)"


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
    ) -> None:
        self._node = node_name
        self._publish_address = publish_address
        self._state_file = state_file
        self.start_delay_s = start_delay_s
        # None: every image "exists"; a set lets tests simulate a missing image.
        self._known_images = known_images
        self._lock = threading.Lock()
        self._containers: dict[int, ManagedContainer] = self._load()
        # SIMULATED warm desktops, in memory only: a restarted agent starts them afresh.
        self._warm: dict[str, WarmContainer] = {}

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
