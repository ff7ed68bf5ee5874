"""What every desktop container of a node shares, session's or warm: the Docker plumbing.

One :class:`DesktopContainers` per node holds the engine client and the node's settings,
and does what both :class:`~nodeagent.runtime.docker_runtime.DockerRuntime` (sessions) and
:class:`~nodeagent.runtime.docker_warm.DockerWarmDesktops` (warm desktops) need: image look
up, home volumes, password folders, limits and lockdown, the node's sealed desktop network
(:mod:`~nodeagent.runtime.desktop_network`), waiting for the VNC handshake, describing a
container found by its labels, and removing containers.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import docker
from docker.errors import APIError, DockerException, ImageNotFound, NotFound
from docker.models.containers import Container

from nodeagent.config import DEFAULT_STOP_GRACE_S, DEFAULT_TMPFS_MB
from nodeagent.mps import CLIENT_PIPE_DIRECTORY, SHM_MOUNT, MpsSupervisor, MpsUnavailable
from nodeagent.protocol import (
    DESKTOP_GID,
    DESKTOP_HOME,
    DESKTOP_UID,
    LABEL_INSTALLATION,
    LABEL_MANAGED,
    LABEL_NODE,
    LABEL_PLACEMENT,
    LABEL_SESSION,
    LABEL_WARM,
    DesiredSession,
    DesktopSpec,
)
from nodeagent.readiness import VNC_PASSWORD_LENGTH, DesktopNotReady, wait_for_desktop
from nodeagent.runtime.base import ManagedContainer, RuntimeUnavailable, StartFailed
from nodeagent.runtime.claims import ClaimRecord, ClaimRecords
from nodeagent.runtime.container_listing import ContainerListing
from nodeagent.runtime.desktop_network import DESKTOP_SYSCTLS, ensure_network
from nodeagent.runtime.desktop_ports import (
    AUDIO_PORT_KEY,
    WEBSOCKIFY_PORT_KEY,
    audio_port,
    published_port,
)
from nodeagent.runtime.home_volumes import HomeVolumes
from nodeagent.runtime.usage import cpu_limit, gpu_devices

logger = logging.getLogger(__name__)

PASSWORD_FILE_NAME = "passwd"
DESKTOP_USER = f"{DESKTOP_UID}:{DESKTOP_GID}"
# What a start or claim attempt may fail with; it becomes StartFailed with a readable reason.
START_ERRORS = (DockerException, OSError, DesktopNotReady, StartFailed)

ReadinessCheck = Callable[..., object]
# A desktop that does not answer while its memory use is this close to its limit is starved
# of memory: without swap (cgroup v1 measured, docs/measurements.md) the kernel may keep
# reclaiming its programs' pages for tens of seconds instead of OOM-killing anything.
_AT_MEMORY_LIMIT = 0.9
WILDCARD_ADDRESSES = ("0.0.0.0", "", "::")
# Where the desktop images write outside the home (deskpool-start: its runtime folder, the X
# socket, the session's programs' temporary files): tmpfs, each capped, under a read-only root.
TMPFS_PATHS = ("/tmp", "/var/tmp")


def docker_client() -> docker.DockerClient:
    """A client for the local engine, or RuntimeUnavailable when none answers."""
    try:
        client = docker.from_env(timeout=30)
        client.ping()
    except DockerException as error:
        raise RuntimeUnavailable(f"Docker engine not reachable: {error}") from error
    return client


def nvidia_runtime_available(client: docker.DockerClient) -> bool:
    """True when ``docker info`` lists the ``nvidia`` runtime."""
    try:
        return "nvidia" in (client.info().get("Runtimes") or {})
    except DockerException:
        return False


class DesktopContainers:
    """The node's engine, settings and claim records, and what every desktop needs of them."""

    def __init__(
        self,
        client: docker.DockerClient,
        *,
        node_name: str,
        sessions_dir: Path,
        publish_address: str = "127.0.0.1",
        stop_grace_s: float = DEFAULT_STOP_GRACE_S,
        ready_timeout_s: float = 60.0,
        readiness: ReadinessCheck = wait_for_desktop,
        blocked_networks: Sequence[str] = (),
        home_root: Path | None = None,
        installation: str = "",
        homes_dir: Path | None = None,
        default_quota_mb: int = 0,
        tmpfs_mb: int = DEFAULT_TMPFS_MB,
        mps: MpsSupervisor | None = None,
    ) -> None:
        self.client = client
        self.listing = ContainerListing(client)  # inspections kept while unchanged
        # The MPS control daemons of the GPUs offered as shares (None: no GPU in share mode).
        self.mps = mps
        # The portal's installation id (RegistrationAnswer): in every name and label made,
        # and the only containers found are those carrying it.
        self.installation = installation
        # DESKPOOL_HOME_ROOT: homes are folders there (shared by the nodes); else, with a
        # homes folder (DESKPOOL_HOMES_DIR), images the disk bounds (home_volumes).
        self.home_root = home_root
        self.homes = HomeVolumes(
            client,
            node=node_name,
            labels=self.own_labels,
            home_root=home_root,
            homes_dir=homes_dir,
            default_quota_mb=default_quota_mb,
        )
        # The size cap (MB) of each of the desktop's writable temporary folders (tmpfs: it
        # counts against the desktop's memory); its root filesystem is read-only.
        self.tmpfs_mb = tmpfs_mb
        self.blocked_networks = tuple(blocked_networks)
        self.node = node_name
        self.sessions_dir = sessions_dir.resolve()
        self.publish_address = publish_address
        # Docker counts its stop timeout in whole seconds.
        self.stop_timeout = max(1, math.ceil(stop_grace_s))
        self.ready_timeout_s = ready_timeout_s
        self.readiness = readiness
        self.claims = ClaimRecords(self.sessions_dir)
        if publish_address in WILDCARD_ADDRESSES:
            logger.warning(
                "DESKPOOL_PUBLISH_ADDRESS is %r: desktop ports are published on every "
                "address of node %s, not only its management path",
                publish_address,
                node_name,
            )
        self.gpu_enabled = nvidia_runtime_available(client)
        if not self.gpu_enabled:
            logger.warning(
                "Docker has no 'nvidia' runtime on node %s: desktops start WITHOUT a GPU "
                "(their GPU slice is simulated).",
                node_name,
            )

    # -- finding -------------------------------------------------------------------------

    def own_labels(self) -> dict[str, str]:
        """The labels of everything this node's agent makes: managed, node, installation."""
        labels = {LABEL_MANAGED: "true", LABEL_NODE: self.node}
        if self.installation:
            labels[LABEL_INSTALLATION] = self.installation
        return labels

    def labelled(self, *labels: str) -> list[Container]:
        """This node's managed containers (running or not) carrying all these labels, of
        this installation only: another portal's agent of the same node name on this engine
        has other ones (without an installation id: only those carrying none)."""
        wanted = [f"{key}={value}" for key, value in self.own_labels().items()]
        # The node's own listing, the further labels picked here: a step's two look-ups
        # (sessions, warm desktops) then share one listing (ContainerListing.held).
        found = [c for c in self.listing.list({"label": wanted}) if has_labels(c, labels)]
        if self.installation:
            return found
        return [c for c in found if LABEL_INSTALLATION not in (c.labels or {})]

    def one_listing(self) -> contextlib.AbstractContextManager[None]:
        """The block's look-ups on this thread share one engine listing (a reconcile step)."""
        return self.listing.held()

    def named(self, name: str) -> Container | None:
        try:
            return self.client.containers.get(name)
        except NotFound:
            return None

    def describe(
        self, container: Container, claims: dict[str, ClaimRecord] | None = None
    ) -> ManagedContainer | None:
        """The session desktop a container is; None for an unclaimed warm desktop (or a
        container without a usable session label)."""
        placement = container.labels.get(LABEL_PLACEMENT, "")
        if key := container.labels.get(LABEL_WARM):
            # A warm desktop is a session's only once claimed; labels cannot change, so the
            # session comes from the agent's claim record.
            claim = self.claims.get(key) if claims is None else claims.get(key)
            if claim is None:
                return None
            session_id = claim.session_id
            placement = claim.placement
            home_volume = claim.home_volume
        else:
            home_volume = mounted_home(container.attrs)
            try:
                session_id = int(container.labels.get(LABEL_SESSION, ""))
            except ValueError:
                return None
        state = container.attrs.get("State", {})
        running = bool(state.get("Running"))
        return ManagedContainer(
            session_id=session_id,
            container_id=container.id or "",
            running=running,
            status=str(state.get("Status", container.status)),
            host=self.publish_address,
            port=published_port(container.attrs),
            audio_port=audio_port(container),
            exit_code=None if running else state.get("ExitCode"),
            oom_killed=bool(state.get("OOMKilled")),
            error=str(state.get("Error") or ""),
            placement=placement,
            memory_limit_mb=memory_limit_mb(container.attrs),
            cpu_limit=cpu_limit(container.attrs),
            gpu_devices=gpu_devices(container.attrs) if self.gpu_enabled else (),
            home_volume=home_volume,
        )

    def exit_reason(self, container: Container) -> str | None:
        """Why a session's container stopped while it started, with its last output."""
        try:
            container.reload()
        except DockerException as error:
            return f"container vanished while starting: {error}"
        described = self.describe(container)
        if described is None or described.running:
            return None
        return described.exit_reason() + log_tail(container)

    # -- preparing -----------------------------------------------------------------------

    def require_image(self, image: str) -> None:
        try:
            self.client.images.get(image)
        except ImageNotFound:
            # No registry is reachable from the nodes: images are built locally.
            raise StartFailed(f"image {image} is not present on node {self.node}") from None
        except DockerException as error:
            raise StartFailed(f"cannot look up image {image}: {error}") from error

    def ensure_home_volume(self, session: DesiredSession) -> bool:
        """Create the home volume unless it exists; True when this call created it
        (:meth:`ensure_volume`, with the session's quota)."""
        return self.ensure_volume(session.home_volume, session.user, session.home_quota_mb)[1]

    def ensure_volume(
        self, name: str, user: str = "", quota_mb: int | None = None
    ) -> tuple[Any, bool]:
        """The one way a home is made (:meth:`HomeVolumes.ensure`): the volume ``name``
        (``user`` for its label) bounded by ``quota_mb`` (None: the node's default; 0: none)
        where the node keeps homes in images, and whether this call created it."""
        return self.homes.ensure(name, user, quota_mb)

    def home_folder(self, name: str, *, create: bool) -> Path | None:
        """Where the home volume ``name`` keeps its files here (:meth:`HomeVolumes.folder`)."""
        return self.homes.folder(name, create=create)

    def home_dir(self, volume: Any) -> Path:
        """Where a home volume's files are on this host (:meth:`HomeVolumes.home_dir`)."""
        return self.homes.home_dir(volume)

    def write_password(self, directory: Path, password: str) -> None:
        # The parent is root-only (0700) so host users cannot read passwords; the container
        # only sees the mounted session folder, which uid 1000 must be able to read.
        self.sessions_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(self.sessions_dir, 0o700)
        shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir(mode=0o755)
        os.chmod(directory, 0o755)
        password_file = directory / PASSWORD_FILE_NAME
        password_file.write_text(password[:VNC_PASSWORD_LENGTH] + "\n")
        os.chmod(password_file, 0o444)

    def replace_password(self, directory: Path, password: str) -> None:
        """Swap the password file of a running desktop (a rename: never half written)."""
        if not directory.is_dir():
            raise StartFailed(f"password folder {directory} is missing")
        temporary = directory / f".{PASSWORD_FILE_NAME}.new"
        temporary.write_text(password[:VNC_PASSWORD_LENGTH] + "\n")
        os.chmod(temporary, 0o444)
        temporary.replace(directory / PASSWORD_FILE_NAME)

    def limits_args(self, spec: DesktopSpec, what: str) -> dict[str, Any]:
        """Image, limits, lockdown, network, published ports and GPU: what every desktop
        shares. The ports (websockify's, and the sound's where the image serves it) are
        published on the node's management address only. ``volumes`` holds the GPU's MPS
        pipe folder for a share's desktop: callers add theirs to it."""
        environment: dict[str, str] = {}
        args: dict[str, Any] = {
            "image": spec.image,
            "detach": True,
            "nano_cpus": int(spec.cpus * 1_000_000_000),
            "mem_limit": f"{spec.memory_mb}m",
            "pids_limit": spec.pids_limit,
            "shm_size": f"{spec.shm_mb}m",
            "cap_drop": ["ALL"],
            "security_opt": ["no-new-privileges"],
            "user": DESKTOP_USER,
            "ports": {
                WEBSOCKIFY_PORT_KEY: (self.publish_address, None),
                AUDIO_PORT_KEY: (self.publish_address, None),
            },
            "network": ensure_network(
                self.client, self.node, self.blocked_networks, self.installation
            ),
            "sysctls": dict(DESKTOP_SYSCTLS),
            "environment": environment,
            "volumes": {},
            # Nothing a desktop writes outside its home reaches the node's disk: a read-only
            # root, and capped temporary folders in memory (docs/security.md).
            "read_only": True,
            "tmpfs": {path: f"size={self.tmpfs_mb}m,mode=1777,exec" for path in TMPFS_PATHS},
        }
        # deskpool-save (the image's SIGTERM handler) fits the save hooks into this.
        environment["DESKPOOL_STOP_GRACE_S"] = str(self.stop_timeout)
        devices = spec.gpu_devices
        if devices and self.gpu_enabled:
            args["runtime"] = "nvidia"
            environment["NVIDIA_VISIBLE_DEVICES"] = ",".join(devices)
            environment["NVIDIA_DRIVER_CAPABILITIES"] = "compute,utility,graphics"
            self.share_args(devices, args)
        else:
            # "void": an image that defaults to "all" (CUDA bases do) must not see any GPU.
            environment["NVIDIA_VISIBLE_DEVICES"] = "void"
            if devices:
                environment["DESKPOOL_SIMULATED_GPU_DEVICES"] = ",".join(devices)
                logger.info(
                    "%s: no NVIDIA runtime, GPU slice %s is simulated", what, ",".join(devices)
                )
        return args

    def share_args(self, devices: Sequence[str], args: dict[str, Any]) -> None:
        """A share's desktop is a capped MPS client of its GPU's daemon: the pipe folder
        (read-only) and the caps in its environment; without a healthy daemon it does not
        start (never an uncapped share)."""
        try:
            share = self.mps.client_of(devices) if self.mps is not None else None
        except MpsUnavailable as error:
            raise StartFailed(str(error)) from None
        if share is None:
            return
        args["environment"].update(share.environment)
        args["volumes"] = {
            str(share.pipe_dir): {"bind": CLIENT_PIPE_DIRECTORY, "mode": "ro"},
            # The GPU's shm, where MPS clients meet their server (in place of the desktop's own).
            str(share.shm_dir): {"bind": SHM_MOUNT, "mode": "rw"},
        }
        del args["shm_size"]

    # -- running -------------------------------------------------------------------------

    def await_desktop(self, container: Container) -> int:
        """The started container's websockify port, once a VNC handshake answers there."""
        container.reload()
        port = published_port(container.attrs)
        if port is None:
            raise StartFailed("the engine published no port for websockify")
        self.await_answer(container, port)
        return port

    def await_answer(
        self, container: Container, port: int, check: ReadinessCheck | None = None
    ) -> None:
        """Wait for a VNC handshake on the container's published port (``check``: instead
        of :attr:`readiness`, a claim's login). One that exits meanwhile ends the wait with
        its exit reason; one still stuck at its memory limit when the time is up fails as
        out of memory rather than as a bare timeout."""
        try:
            (check or self.readiness)(
                connect_host(self.publish_address),
                port,
                self.ready_timeout_s,
                abort_reason=lambda: self.exit_reason(container),
            )
        except DesktopNotReady as error:
            starved = self.memory_starved(container)
            if starved is None:
                raise
            raise DesktopNotReady(f"{starved}; {error}") from error

    def memory_starved(self, container: Container) -> str | None:
        """Why a running container is out of memory without having been OOM-killed (its
        use at its limit); None when it is not, has no limit or is gone."""
        limit = (container.attrs.get("HostConfig") or {}).get("Memory") or 0
        if not limit:
            return None
        try:
            stats = container.stats(stream=False)
        except DockerException:
            return None
        usage = (stats.get("memory_stats") or {}).get("usage") or 0
        if usage < limit * _AT_MEMORY_LIMIT:
            return None
        return (
            "desktop ran out of memory: it hung at its limit and did not answer "
            f"(memory limit {memory_limit_mb(container.attrs)} MB)"
        )

    def remove(
        self,
        container: Container,
        *,
        volumes: bool,
        force: bool = False,
        grace_s: int | None = None,
    ) -> None:
        """Stop and remove one container; gone already is fine.

        A running desktop gets SIGTERM and ``grace_s`` (default: the node's stop grace)
        before SIGKILL: its image runs the save hooks and asks its programs to close
        (nodeagent/images/files/deskpool-save), and most are gone in well under a second. A
        desktop that is not running (crashed, killed, OOM) is only removed.
        """
        try:
            if container.status == "running":
                container.stop(timeout=self.stop_timeout if grace_s is None else grace_s)
            container.remove(v=volumes, force=force)
        except NotFound:
            pass
        except APIError as error:
            if error.status_code != 409:  # 409: removal already in progress
                raise


def archive(container: Container, path: str) -> bytes:
    """A folder of the container's image (or filesystem) as tar bytes."""
    stream, _ = container.get_archive(path)
    return b"".join(stream)


def mounted_home(attrs: dict[str, Any]) -> str:
    """The name of the home volume a container mounts ("" when none is)."""
    for mount in attrs.get("Mounts") or []:
        if mount.get("Destination") == DESKTOP_HOME and mount.get("Type") == "volume":
            return str(mount.get("Name") or "")
    return ""


def memory_limit_mb(attrs: dict[str, Any]) -> int | None:
    limit = (attrs.get("HostConfig") or {}).get("Memory") or 0
    return int(limit) // (1024 * 1024) or None


def connect_host(publish_address: str) -> str:
    # Published on every interface: the loopback reaches it from the agent.
    return "127.0.0.1" if publish_address in WILDCARD_ADDRESSES else publish_address


def log_tail(container: Container, lines: int = 5) -> str:
    try:
        tail = container.logs(tail=lines).decode(errors="replace").strip()
    except DockerException:
        return ""
    return f"; last output: {tail}" if tail else ""


def start_error_text(error: BaseException) -> str:
    if isinstance(error, APIError):
        return f"the Docker engine refused the desktop: {error.explanation or error}"
    return str(error)


def has_labels(container: Container, labels: Sequence[str]) -> bool:
    """Whether the container carries every label, as the engine's ``label`` filter reads
    them: ``key`` (present) or ``key=value`` (that value)."""
    own = container.labels or {}
    for label in labels:
        key, is_pair, value = label.partition("=")
        if key not in own or (is_pair and own[key] != value):
            return False
    return True
