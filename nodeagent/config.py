"""Agent configuration, read from ``DESKPOOL_*`` environment variables (CLI flags override)."""

from __future__ import annotations

import ipaddress
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from .addresses import node_address

RuntimeChoice = Literal["docker", "simulated", "auto"]
# SIGTERM to SIGKILL when a desktop is stopped: its save hooks and programs save meanwhile
# (nodeagent/images/files/deskpool-save). DESKPOOL_AGENT_STOP_GRACE_S; at most this much.
DEFAULT_STOP_GRACE_S = 20.0
STOP_GRACE_MAX_S = 300.0
# A home's quota when the portal sends none (an older portal): DESKPOOL_HOME_QUOTA_MB, the
# portal's default too. 0: no quota (plain volumes, bounded by nothing but the node's disk).
DEFAULT_HOME_QUOTA_MB = 10240
# The cap of each of a desktop's temporary folders (/tmp, ...; tmpfs under a read-only root,
# counted against its memory): DESKPOOL_DESKTOP_TMPFS_MB.
DEFAULT_TMPFS_MB = 512
_RUNTIME_CHOICES: tuple[RuntimeChoice, ...] = ("docker", "simulated", "auto")
# At most this many shares of one GPU (GpuInventory.share_count's bound).
SHARES_MAX = 64
MPS_CONTROL_PROGRAM = "nvidia-cuda-mps-control"


@dataclass(frozen=True)
class GpuShares:
    """One GPU's share mode: ``count`` desktops at once, each capped at ``memory_mb`` of GPU
    memory and ``100 / count`` % of its SMs (CUDA MPS; docs/mig.md)."""

    count: int
    memory_mb: int

    @property
    def thread_percentage(self) -> int:
        """Each share's CUDA_MPS_ACTIVE_THREAD_PERCENTAGE: 100 / count, rounded, at least 1."""
        return max(1, round(100 / self.count))


class ConfigError(ValueError):
    """A configuration value cannot be used; the message names the variable."""


def _default_state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "deskpool-agent"


@dataclass(frozen=True)
class AgentConfig:
    """Everything the agent needs to know before it talks to the portal."""

    portal_url: str = "http://127.0.0.1:8000"
    join_token: str | None = None
    node_name: str = field(default_factory=socket.gethostname)
    state_dir: Path = field(default_factory=_default_state_dir)
    fleet_file: Path | None = None
    runtime: RuntimeChoice = "auto"
    publish_address: str = "127.0.0.1"
    # None: use the interval the portal hands out at registration.
    poll_interval_s: float | None = None
    # Extra node labels for real (non-simulated) nodes, e.g. {"rack": "r3"}.
    labels: dict[str, str] = field(default_factory=dict)
    stop_grace_s: float = DEFAULT_STOP_GRACE_S
    ready_timeout_s: float = 60.0
    start_workers: int = 10
    # Addresses or CIDR networks elsewhere that desktops must not reach (the management
    # network); the portal's own addresses are always added (docs/security.md).
    desktop_blocked_networks: tuple[str, ...] = ()
    # DESKPOOL_HOME_ROOT: a folder every node mounts (NFS) holding the students' homes, so a
    # desktop started on another node finds the same home. None: homes are per-node volumes.
    home_root: Path | None = None
    # DESKPOOL_HOMES_DIR: where node-local homes are kept as disk-bounded images (None: the
    # state folder's ``homes/<node>``); DESKPOOL_HOME_IMAGES=off: plain volumes, unbounded.
    homes_dir: Path | None = None
    home_images: bool = True
    home_quota_mb: int = DEFAULT_HOME_QUOTA_MB
    desktop_tmpfs_mb: int = DEFAULT_TMPFS_MB
    # The desktop gateway (issue 34), listening on publish_address. DESKPOOL_GATEWAY=off:
    # none (the registration then has no gateway_port). DESKPOOL_GATEWAY_PORT: 0 is any free
    # port (several agents on one machine, the demo); production fixes one that nginx knows.
    gateway_enabled: bool = True
    gateway_port: int = 0
    # DESKPOOL_GATEWAY_TRUSTED_PROXIES: the nginx hosts, whose X-Real-IP header names the
    # browser in the gateway's events (the audit's address); nobody else's is believed.
    gateway_trusted_proxies: tuple[str, ...] = ()
    # DESKPOOL_GPU_SHARES: GPUs offered in share mode, by UUID or index ("all": every GPU not
    # in MIG mode) -> N shares of M MB, enforced by one MPS control daemon per GPU
    # (nodeagent/mps.py); DESKPOOL_MPS_CONTROL: the control program (found on PATH).
    gpu_shares: dict[str, GpuShares] = field(default_factory=dict)
    mps_control: str = MPS_CONTROL_PROGRAM

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> AgentConfig:
        """Read the ``DESKPOOL_*`` variables; unset ones keep their defaults."""
        env = os.environ if env is None else env
        config = cls()
        values: dict[str, object] = {}
        if url := env.get("DESKPOOL_PORTAL_URL"):
            values["portal_url"] = url.rstrip("/")
        if token := env.get("DESKPOOL_JOIN_TOKEN"):
            values["join_token"] = token
        if name := env.get("DESKPOOL_NODE_NAME"):
            values["node_name"] = name
        if state_dir := env.get("DESKPOOL_STATE_DIR"):
            values["state_dir"] = Path(state_dir)
        if fleet := env.get("DESKPOOL_FLEET_FILE"):
            values["fleet_file"] = Path(fleet)
        if runtime := env.get("DESKPOOL_RUNTIME"):
            values["runtime"] = parse_runtime(runtime)
        if address := env.get("DESKPOOL_PUBLISH_ADDRESS"):
            values["publish_address"] = parse_publish_address(address)
        if interval := env.get("DESKPOOL_POLL_INTERVAL"):
            values["poll_interval_s"] = _positive_float("DESKPOOL_POLL_INTERVAL", interval)
        if labels := env.get("DESKPOOL_LABELS"):
            values["labels"] = parse_labels(labels)
        if grace := env.get("DESKPOOL_AGENT_STOP_GRACE_S"):
            values["stop_grace_s"] = parse_stop_grace(grace)
        if blocked := env.get("DESKPOOL_DESKTOP_BLOCKED_NETWORKS"):
            values["desktop_blocked_networks"] = parse_networks(blocked)
        if home_root := env.get("DESKPOOL_HOME_ROOT"):
            values["home_root"] = parse_home_root(home_root)
        if homes_dir := env.get("DESKPOOL_HOMES_DIR"):
            values["homes_dir"] = parse_homes_dir(homes_dir)
        if images := env.get("DESKPOOL_HOME_IMAGES"):
            values["home_images"] = parse_on_off("DESKPOOL_HOME_IMAGES", images)
        if quota := env.get("DESKPOOL_HOME_QUOTA_MB"):
            values["home_quota_mb"] = parse_megabytes("DESKPOOL_HOME_QUOTA_MB", quota, 0)
        if tmpfs := env.get("DESKPOOL_DESKTOP_TMPFS_MB"):
            values["desktop_tmpfs_mb"] = parse_megabytes("DESKPOOL_DESKTOP_TMPFS_MB", tmpfs, 1)
        if gateway := env.get("DESKPOOL_GATEWAY"):
            values["gateway_enabled"] = parse_gateway(gateway)
        if gateway_port := env.get("DESKPOOL_GATEWAY_PORT"):
            values["gateway_port"] = parse_gateway_port(gateway_port)
        if proxies := env.get("DESKPOOL_GATEWAY_TRUSTED_PROXIES"):
            values["gateway_trusted_proxies"] = parse_networks(
                proxies, "DESKPOOL_GATEWAY_TRUSTED_PROXIES"
            )
        if shares := env.get("DESKPOOL_GPU_SHARES"):
            values["gpu_shares"] = parse_gpu_shares(shares)
        if program := env.get("DESKPOOL_MPS_CONTROL"):
            values["mps_control"] = program.strip()
        return replace(config, **values)  # type: ignore[arg-type]

    def credential_file(self) -> Path:
        """Where the node credential from the first registration is kept."""
        return self.state_dir.resolve() / f"node-{self.node_name}.json"

    def sessions_dir(self) -> Path:
        """Parent of the per-session VNC password folders (absolute: Docker bind-mounts them)."""
        return self.state_dir.resolve() / "sessions" / self.node_name

    def mps_dir(self) -> Path:
        """Parent of the per-GPU MPS folders (pipe and log directories, absolute: Docker
        bind-mounts each GPU's pipe directory into that GPU's share desktops)."""
        return self.state_dir.resolve() / "mps" / self.node_name

    def home_images_dir(self) -> Path | None:
        """Where node-local homes are kept as images (beside the sessions folder unless
        DESKPOOL_HOMES_DIR says); None with images off or homes under a shared root."""
        if not self.home_images or self.home_root is not None:
            return None
        if self.homes_dir is not None:
            return self.homes_dir
        return self.state_dir.resolve() / "homes" / self.node_name


def parse_runtime(value: str) -> RuntimeChoice:
    """Validate a ``DESKPOOL_RUNTIME`` value."""
    for choice in _RUNTIME_CHOICES:
        if value.strip().lower() == choice:
            return choice
    raise ConfigError(
        f"DESKPOOL_RUNTIME must be one of {', '.join(_RUNTIME_CHOICES)}, not {value!r}"
    )


def parse_publish_address(value: str) -> str:
    """Validate ``DESKPOOL_PUBLISH_ADDRESS``: the node's management address, which the agent
    registers, its desktops' ports and its gateway listen on, and the portal builds the
    gateway's URL from (a hostname or an IP address only)."""
    try:
        return node_address(value.strip())
    except ValueError as error:
        raise ConfigError(
            f"DESKPOOL_PUBLISH_ADDRESS {value!r}: {error}. Set it to this node's address on "
            "the network the portal reaches it by (docs/deploy.md)"
        ) from None


def parse_gateway(value: str) -> bool:
    """Validate ``DESKPOOL_GATEWAY``: ``on`` (the default) or ``off``."""
    return parse_on_off("DESKPOOL_GATEWAY", value)


def parse_on_off(name: str, value: str) -> bool:
    """Validate a switch: ``on`` or ``off``."""
    choice = value.strip().lower()
    if choice not in ("on", "off"):
        raise ConfigError(f"{name} must be on or off, not {value!r}")
    return choice == "on"


def parse_megabytes(name: str, value: str, least: int) -> int:
    """Validate a size in MB: a whole number, at least ``least``."""
    try:
        number = int(value.strip())
    except ValueError:
        number = least - 1
    if number < least:
        raise ConfigError(f"{name} must be a whole number of MB, at least {least}, not {value!r}")
    return number


def parse_homes_dir(value: str) -> Path:
    """Validate ``DESKPOOL_HOMES_DIR``: an absolute path (made when missing)."""
    path = Path(value.strip())
    if not path.is_absolute():
        raise ConfigError(f"DESKPOOL_HOMES_DIR must be an absolute path, not {value!r}")
    return path


def parse_gateway_port(value: str) -> int:
    """Validate ``DESKPOOL_GATEWAY_PORT``: 0 (any free port) to 65535."""
    try:
        port = int(value.strip())
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise ConfigError(
            f"DESKPOOL_GATEWAY_PORT must be a port number (0: any free one), not {value!r}"
        )
    return port


def parse_gpu_shares(value: str) -> dict[str, GpuShares]:
    """Parse ``all=4x10240`` or ``GPU-3f…=4x10240,1=2x20480`` (a UUID or an index, then N
    shares of M MB each) into share modes by GPU."""
    shares: dict[str, GpuShares] = {}
    for item in filter(None, (part.strip() for part in value.split(","))):
        gpu, sep, how = item.partition("=")
        count, times, memory = how.strip().lower().partition("x")
        gpu = gpu.strip()
        if not (sep and times and gpu and count.isdigit() and memory.isdigit()):
            raise ConfigError(
                "DESKPOOL_GPU_SHARES entries look like GPU=NxMB (all=4x10240, "
                f"GPU-<uuid>=2x20480 or 0=4x10240), not {item!r}"
            )
        if not 1 <= int(count) <= SHARES_MAX or int(memory) < 1:
            raise ConfigError(
                f"DESKPOOL_GPU_SHARES {item!r}: 1 to {SHARES_MAX} shares of at least 1 MB"
            )
        if gpu in shares or (gpu == "all" and shares) or "all" in shares:
            raise ConfigError(
                f"DESKPOOL_GPU_SHARES names GPU {gpu!r} twice (all: every GPU, on its own)"
            )
        shares[gpu] = GpuShares(count=int(count), memory_mb=int(memory))
    return shares


def parse_labels(value: str) -> dict[str, str]:
    """Parse ``rack=r1,cooling=air`` into a dict."""
    labels: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in value.split(","))):
        key, sep, label = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"DESKPOOL_LABELS entries look like key=value, not {item!r}")
        labels[key.strip()] = label.strip()
    return labels


def parse_networks(value: str, name: str = "DESKPOOL_DESKTOP_BLOCKED_NETWORKS") -> tuple[str, ...]:
    """Parse ``10.20.0.0/24,10.30.0.5`` into CIDR networks."""
    networks = []
    for item in filter(None, (part.strip() for part in value.split(","))):
        try:
            networks.append(str(ipaddress.ip_network(item, strict=False)))
        except ValueError:
            raise ConfigError(f"{name} entries are addresses or networks, not {item!r}") from None
    return tuple(networks)


def parse_home_root(value: str) -> Path:
    """Validate ``DESKPOOL_HOME_ROOT``: an absolute path to a folder that exists (the shared
    mount, which the agent never creates: a missing mount must not fill the local disk)."""
    path = Path(value.strip())
    if not path.is_absolute():
        raise ConfigError(f"DESKPOOL_HOME_ROOT must be an absolute path, not {value!r}")
    if not path.is_dir():
        raise ConfigError(
            f"DESKPOOL_HOME_ROOT {value!r} is not an existing directory (is the shared home "
            "root mounted on this node?)"
        )
    return path


def parse_stop_grace(value: str) -> float:
    """Validate ``DESKPOOL_AGENT_STOP_GRACE_S``: seconds, more than 0, at most 300.

    Each stop holds one of the agent's stop workers for up to this long (a desktop whose
    saving ends sooner is gone sooner), so hours would starve the other stops.
    """
    grace = _positive_float("DESKPOOL_AGENT_STOP_GRACE_S", value)
    if not grace <= STOP_GRACE_MAX_S:  # also NaN
        raise ConfigError(
            f"DESKPOOL_AGENT_STOP_GRACE_S must be at most {STOP_GRACE_MAX_S:.0f} seconds, "
            f"not {value!r}"
        )
    return grace


def _positive_float(name: str, value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise ConfigError(f"{name} must be a number of seconds, not {value!r}") from None
    if number <= 0:
        raise ConfigError(f"{name} must be positive, not {value!r}")
    return number
