"""What every desktop runtime shares: container names, what a runtime finds, its interface."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from nodeagent.failures import classify
from nodeagent.protocol import (
    LABEL_INSTALLATION,
    DesiredSession,
    DesiredWarm,
    RuntimeKind,
    SessionUsage,
)

_NAME_UNSAFE = re.compile(r"[^a-z0-9_.-]+")
_NODE_PART_MAX = 40


def node_name_part(node_name: str) -> str:
    """The node name as it may appear in a Docker container name.

    Docker allows ``[a-zA-Z0-9][a-zA-Z0-9_.-]*``. A name that had to be changed (case,
    other characters, length) gets six hex digits of its hash, so two names that clean
    up the same (``GPU A``, ``gpu_a``...) still give different container names.
    """
    cleaned = _NAME_UNSAFE.sub("-", node_name.lower()).strip("-_.")[:_NODE_PART_MAX]
    if cleaned != node_name or not cleaned:
        digest = hashlib.sha256(node_name.encode()).hexdigest()[:6]
        cleaned = f"{cleaned}-{digest}" if cleaned else digest
    return cleaned


def name_stem(node_name: str, installation: str = "") -> str:
    """``deskpool-<installation>-<node>`` (``deskpool-<node>`` without an installation id):
    what every Docker object of this node's agent is named after. With the portal's
    installation id, two portals' agents of the same node name on one engine stay apart."""
    part = node_name_part(node_name)
    return f"deskpool-{installation}-{part}" if installation else f"deskpool-{part}"


def container_name(node_name: str, session_id: int, installation: str = "") -> str:
    """``deskpool-[<installation>-]<node>-s<session>``: unique per portal and node, so
    agents may share one engine."""
    return f"{name_stem(node_name, installation)}-s{session_id}"


def warm_container_name(node_name: str, key: str, installation: str = "") -> str:
    """``deskpool-[<installation>-]<node>-w<key>``: a warm desktop, claimed or not."""
    return f"{name_stem(node_name, installation)}-w{key}"


@dataclass(frozen=True)
class WarmContainer:
    """A warm desktop (started for a booking, no user yet) as found by its labels.

    ``claimed_by`` is the session that claimed it (from the agent's claim record): from then
    on it is that session's desktop and :meth:`DesktopRuntime.list_managed` lists it too.
    """

    key: str
    container_id: str
    running: bool
    status: str
    port: int | None
    booking: str = ""
    claimed_by: int | None = None
    reason: str = ""  # why it is not running, when it is not


@dataclass(frozen=True)
class ManagedContainer:
    """A desktop container the agent manages, as found by its labels."""

    session_id: int
    container_id: str
    running: bool
    status: str  # the engine's word: created, running, exited, dead, ...
    host: str
    port: int | None  # published websockify port; None when simulated
    exit_code: int | None = None
    oom_killed: bool = False
    error: str = ""
    simulated: bool = False  # True: no container exists, the simulated runtime made it up
    placement: str = ""  # its deskpool.placement label; "" when made without one
    memory_limit_mb: int | None = None  # the container's memory limit, when it has one
    audio_port: int | None = None  # published sound port, when its image serves sound
    cpu_limit: float | None = None  # its CPU limit in CPUs (--cpus), when it has one
    gpu_devices: tuple[str, ...] = ()  # the GPU or MIG UUIDs it sees (real GPUs only)
    home_volume: str = ""  # the home volume it mounts ("" unknown): its usage is measured

    def exit_reason(self) -> str:
        """Why a container is not running, in words for the portal and the user.

        Docker's ``State.OOMKilled`` says the kernel's OOM killer killed *some* process in
        the container's memory cgroup during its life, not that the desktop died of it:
        a user's program killed that way leaves the desktop running, and the flag stays
        set when the desktop later exits for another reason. The desktop itself died of
        it when its main process got SIGKILL, exit code 137 (tini passes it on).
        """
        limit = f", memory limit {self.memory_limit_mb} MB" if self.memory_limit_mb else ""
        if self.oom_killed and self.exit_code == 137:
            return (
                "desktop ran out of memory: the kernel's OOM killer ended it "
                f"(OOMKilled, exit code 137{limit})"
            )
        if self.oom_killed:
            return (
                f"desktop container exited with code {self.exit_code} (status {self.status}) "
                f"after the OOM killer ended a process in it (OOMKilled{limit})"
            )
        if self.error:
            return f"desktop container failed: {self.error}"
        if self.exit_code is not None:
            return f"desktop container exited with code {self.exit_code} (status {self.status})"
        return f"desktop container is {self.status}"


class StartFailed(RuntimeError):
    """A desktop did not start; everything the attempt created has been removed again.

    ``code``: why, as a :mod:`nodeagent.failures` code (read from the message when not given).
    """

    def __init__(self, message: str, *, code: str = "") -> None:
        super().__init__(message)
        self.code = code or classify(message)


def refuse_foreign_home(name: str, labels: dict[str, str] | None, installation: str) -> None:
    """StartFailed when the home volume ``name`` (its ``labels``) belongs to another portal's
    installation than ``installation`` (this agent's): a desktop never mounts another
    installation's home, even one of the same name on a shared engine."""
    owner = (labels or {}).get(LABEL_INSTALLATION, "")
    if owner and owner != installation:
        raise StartFailed(
            f"home volume {name} belongs to another Deskpool installation ({owner}) on this "
            f"Docker engine, not to this one ({installation or 'none'}): it is not mounted"
        )


def home_folder_name(volume_name: str) -> str:
    """A home volume's name as the name of its folder (under a home root, or the simulated
    homes): StartFailed when it cannot be one."""
    if "/" in volume_name or volume_name in (".", "..") or "\0" in volume_name:
        raise StartFailed(f"home volume name {volume_name!r} cannot be a folder name")
    return volume_name


class DesktopRuntime(Protocol):
    """What the reconciler needs from a runtime. Implementations are thread-safe."""

    kind: RuntimeKind

    def list_managed(self) -> list[ManagedContainer]:
        """Containers of this node, running or not, found by label."""
        ...

    def start(self, session: DesiredSession) -> ManagedContainer:
        """Create, start and wait for the desktop to answer a VNC handshake; raise StartFailed."""
        ...

    def stop(self, session_id: int) -> None:
        """Stop (with a grace period) and remove the container; keep the home volume."""
        ...

    def usage(self, containers: Sequence[ManagedContainer]) -> list[SessionUsage]:
        """Each running desktop's own GPU and CPU use (for the heartbeat; idle detection)."""
        ...

    # -- the warm pool (see docs/agent-protocol.md, "Warm pool") --

    def list_warm(self) -> list[WarmContainer]:
        """This node's warm desktops, claimed or not, running or not."""
        ...

    def start_warm(self, warm: DesiredWarm) -> WarmContainer:
        """Start a warm desktop with a random password and wait for its VNC handshake.

        Raise StartFailed, having removed everything the attempt made.
        """
        ...

    def claim(self, key: str, session: DesiredSession) -> ManagedContainer:
        """Make the running warm desktop ``key`` the session's desktop, with its password.

        Raise StartFailed (and remove that warm desktop) when it cannot be claimed.
        """
        ...

    def stop_warm(self, key: str) -> None:
        """Stop and remove a warm desktop and everything it has (password, claim record)."""
        ...

    # -- home files (docs/agent-protocol.md, "Home files") --

    def home_folder(self, home_volume: str, *, create: bool) -> Path | None:
        """Where the home ``home_volume`` keeps its files on this host; None when it does
        not exist here (made first, owned by the desktop user, with ``create``)."""
        ...


class RuntimeUnavailable(RuntimeError):
    """The requested runtime cannot be used on this machine."""
