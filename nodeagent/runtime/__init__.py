"""Desktop runtimes: Docker containers, or a simulated stand-in where no engine runs.

The shared names live in :mod:`nodeagent.runtime.base` and are re-exported here; the
runtimes import them from there, so this package's ``__init__`` may import the runtimes.
"""

from __future__ import annotations

import logging

from nodeagent.config import AgentConfig
from nodeagent.mps import MpsSupervisor
from nodeagent.runtime.base import (
    DesktopRuntime,
    ManagedContainer,
    RuntimeKind,
    RuntimeUnavailable,
    StartFailed,
    WarmContainer,
    container_name,
    node_name_part,
    warm_container_name,
)
from nodeagent.runtime.docker_runtime import DockerRuntime, docker_client
from nodeagent.runtime.simulated_runtime import SimulatedRuntime

logger = logging.getLogger(__name__)

__all__ = [
    "DesktopRuntime",
    "ManagedContainer",
    "RuntimeKind",
    "RuntimeUnavailable",
    "StartFailed",
    "WarmContainer",
    "container_name",
    "make_runtime",
    "node_name_part",
    "warm_container_name",
]


def make_runtime(config: AgentConfig, mps: MpsSupervisor | None = None) -> DesktopRuntime:
    """Docker, simulated, or (``auto``) Docker when an engine answers and simulated otherwise;
    ``mps``: the daemons whose GPUs' desktops are capped MPS clients (Docker only)."""
    if config.runtime == "simulated":
        return SimulatedRuntime.from_config(config)
    try:
        client = docker_client()
    except RuntimeUnavailable as error:
        if config.runtime == "docker":
            raise
        logger.warning(
            "!!! No Docker engine answers (%s). Desktops on node %s are SIMULATED: no "
            "containers will run and users get no real desktop. Set DESKPOOL_RUNTIME=docker "
            "to refuse to start without an engine. !!!",
            error,
            config.node_name,
        )
        return SimulatedRuntime.from_config(config)
    return DockerRuntime.from_config(config, client, mps)
