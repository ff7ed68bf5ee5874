"""``python -m tests.multihost.stand_in_node``: ``python -m nodeagent``, with desktops that
answer.

The agent and its gateway are the real ones; only the SIMULATED runtime is told where its
desktops answer: every desktop it starts (or claims) reports
:data:`~tests.multihost.stand_in_desktop.PORT` on the node's publish address, where the
namespace's stand-in desktop listens. A simulated desktop reports no port, and the agent
hands the gateway only desktops that answer somewhere (``nodeagent.gateway_link``).

Why not the Docker runtime: the engine runs in the host's namespace and publishes its
desktops there, so a node namespace's gateway would reach them only through the host's
addresses, not the node's, and every test of the module would wait for real containers.
"""

from __future__ import annotations

import sys
from dataclasses import replace

import nodeagent.__main__ as agent_main
from nodeagent.config import AgentConfig
from nodeagent.mps import MpsSupervisor
from nodeagent.protocol import DesiredSession
from nodeagent.runtime.base import ManagedContainer
from nodeagent.runtime.simulated_runtime import SimulatedRuntime

from .stand_in_desktop import PORT


class StandInRuntime(SimulatedRuntime):
    """SIMULATED desktops that say they answer on the stand-in desktop's port."""

    def start(self, session: DesiredSession) -> ManagedContainer:
        return self._answering(super().start(session))

    def claim(self, key: str, session: DesiredSession) -> ManagedContainer:
        return self._answering(super().claim(key, session))

    def _answering(self, container: ManagedContainer) -> ManagedContainer:
        container = replace(container, port=PORT)
        with self._lock:  # kept, so that a restarted agent adopts it with its port
            self._containers[container.session_id] = container
            self._save()
        return container


def stand_in_runtime(config: AgentConfig, mps: MpsSupervisor | None = None) -> StandInRuntime:
    """``make_runtime``'s signature; the stand-in nodes share no GPU, so ``mps`` is unused."""
    return StandInRuntime.from_config(config)  # type: ignore[return-value]


if __name__ == "__main__":
    agent_main.make_runtime = stand_in_runtime  # type: ignore[assignment]
    sys.exit(agent_main.main())
