"""Desktops as Docker containers, through the Docker SDK.

One container per session, named ``deskpool-<node>-s<session_id>`` (several agents may
share one engine, as in the demo) and labelled with the ``deskpool.*`` keys from
:mod:`nodeagent.protocol`, so a restarted agent finds (adopts) what it started before:
by label, never by name. The home volume outlives the container; the VNC password
lives in a file under the state directory, bind-mounted read-only, never in the
environment (it would show in ``docker inspect``).

Warm desktops are :class:`~nodeagent.runtime.docker_warm.DockerWarmDesktops`; what both
kinds share is :class:`~nodeagent.runtime.docker_desktops.DesktopContainers`.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
from docker.errors import DockerException, NotFound
from docker.models.containers import Container

from nodeagent.config import DEFAULT_STOP_GRACE_S, DEFAULT_TMPFS_MB, AgentConfig
from nodeagent.mps import MpsSupervisor
from nodeagent.protocol import (
    DESKTOP_HOME,
    DESKTOP_PASSWORD_MOUNT,
    LABEL_COURSE,
    LABEL_PLACEMENT,
    LABEL_SESSION,
    LABEL_USER,
    DesiredSession,
    DesiredWarm,
    RuntimeKind,
    SessionUsage,
)
from nodeagent.readiness import wait_for_desktop
from nodeagent.runtime.base import ManagedContainer, StartFailed, WarmContainer, container_name
from nodeagent.runtime.course_mounts import course_volumes, mounted_sources
from nodeagent.runtime.desktop_network import portal_addresses
from nodeagent.runtime.docker_desktops import (
    START_ERRORS,
    DesktopContainers,
    ReadinessCheck,
    docker_client,
    start_error_text,
)
from nodeagent.runtime.docker_warm import DockerWarmDesktops
from nodeagent.runtime.usage import DockerUsage, NvmlUsage

logger = logging.getLogger(__name__)

__all__ = ["DockerRuntime", "docker_client"]


@dataclass
class _Attempt:
    """What one start attempt created, so a failure removes exactly that."""

    password_dir: Path
    created_volume: bool = False


class DockerRuntime:
    """Starts, lists and stops one node's desktop containers (and its warm desktops)."""

    kind: RuntimeKind = "docker"

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
        self._desktops = DesktopContainers(
            client,
            node_name=node_name,
            sessions_dir=sessions_dir,
            publish_address=publish_address,
            stop_grace_s=stop_grace_s,
            ready_timeout_s=ready_timeout_s,
            readiness=readiness,
            blocked_networks=blocked_networks,
            home_root=home_root,
            installation=installation,
            homes_dir=homes_dir,
            default_quota_mb=default_quota_mb,
            tmpfs_mb=tmpfs_mb,
            mps=mps,
        )
        self._warm = DockerWarmDesktops(self._desktops)
        # NVML only where the engine can give containers a GPU at all.
        self._usage = DockerUsage(client, NvmlUsage() if self.gpu_enabled else None)

    @classmethod
    def from_config(
        cls, config: AgentConfig, client: docker.DockerClient, mps: MpsSupervisor | None = None
    ) -> DockerRuntime:
        return cls(
            client,
            node_name=config.node_name,
            sessions_dir=config.sessions_dir(),
            publish_address=config.publish_address,
            stop_grace_s=config.stop_grace_s,
            ready_timeout_s=config.ready_timeout_s,
            # Desktops reach neither the portal nor the networks the node's admin listed.
            blocked_networks=(
                *config.desktop_blocked_networks,
                *portal_addresses(config.portal_url),
            ),
            home_root=config.home_root,
            homes_dir=config.home_images_dir(),
            default_quota_mb=config.home_quota_mb,
            tmpfs_mb=config.desktop_tmpfs_mb,
            mps=mps,
        )

    @property
    def installation(self) -> str:
        return self._desktops.installation

    def use_installation(self, installation: str) -> None:
        """Name, label, find and remove only this installation's containers from now on (the
        portal's id, from its answer to the registration; before the first reconcile)."""
        self._desktops.installation = installation

    @property
    def gpu_enabled(self) -> bool:
        return self._desktops.gpu_enabled

    # -- listing -------------------------------------------------------------------------

    def one_listing(self) -> contextlib.AbstractContextManager[None]:
        """A reconcile step's look-ups (sessions, warm desktops) share one engine listing."""
        return self._desktops.one_listing()

    def list_managed(self) -> list[ManagedContainer]:
        found = []
        claims = self._desktops.claims.by_key()
        for container in self._desktops.labelled():
            managed = self._desktops.describe(container, claims)
            if managed is not None:
                found.append(managed)
        return found

    def _containers_of(self, session_id: int) -> list[Container]:
        """This node's containers of one session: by label, plus one by name without them,
        plus a warm desktop it claimed."""
        found = {c.id: c for c in self._desktops.labelled(f"{LABEL_SESSION}={session_id}")}
        desktops = self._desktops
        named = desktops.named(container_name(desktops.node, session_id, desktops.installation))
        if named is not None:
            found.setdefault(named.id, named)
        for key in self._desktops.claims.keys_of(session_id):
            for container in self._warm.containers(key):
                found.setdefault(container.id, container)
        return list(found.values())

    # -- starting ------------------------------------------------------------------------

    def start(self, session: DesiredSession) -> ManagedContainer:
        desktops = self._desktops
        desktops.require_image(session.image)
        attempt = _Attempt(password_dir=desktops.sessions_dir / f"s{session.session_id}")
        container: Container | None = None
        try:
            self._remove_stale(session.session_id)
            attempt.created_volume = desktops.ensure_home_volume(session)
            desktops.write_password(attempt.password_dir, session.vnc_password)
            container = desktops.client.containers.create(**self._create_args(session, attempt))
            container.start()
            desktops.await_desktop(container)
            container.reload()
        except START_ERRORS as error:
            self._clean_up_failed(session, container, attempt)
            raise StartFailed(start_error_text(error), code=getattr(error, "code", "")) from error
        except BaseException:
            self._clean_up_failed(session, container, attempt)
            raise
        described = desktops.describe(container)
        assert described is not None  # we set the session label ourselves
        return described

    def wait_ready(self, managed: ManagedContainer) -> ManagedContainer:
        """Wait for a container found running (adopted) to answer a VNC handshake."""
        desktops = self._desktops
        try:
            container = desktops.client.containers.get(managed.container_id)
            if managed.port is None:
                raise StartFailed("the desktop container publishes no websockify port")
            desktops.await_answer(container, managed.port)
        except START_ERRORS as error:
            raise StartFailed(start_error_text(error), code=getattr(error, "code", "")) from error
        return managed

    def _remove_stale(self, session_id: int) -> None:
        # A leftover of this session (crashed agent; or one of the same name whose labels
        # were removed) would block the create or run twice.
        for container in self._containers_of(session_id):
            with contextlib.suppress(NotFound):
                container.remove(force=True)

    def _create_args(self, session: DesiredSession, attempt: _Attempt) -> dict[str, Any]:
        session_id = session.session_id
        desktops = self._desktops
        labels = {
            **desktops.own_labels(),
            LABEL_SESSION: str(session_id),
            LABEL_USER: session.user,
            LABEL_COURSE: session.course,
        }
        if session.placement:
            labels[LABEL_PLACEMENT] = session.placement
        args = self._desktops.limits_args(session, f"session {session_id}")
        args.update(
            name=container_name(desktops.node, session_id, desktops.installation),
            labels=labels,
            volumes={
                **args["volumes"],  # a share's MPS pipe folder (limits_args)
                session.home_volume: {"bind": DESKTOP_HOME, "mode": "rw"},
                str(attempt.password_dir): {"bind": DESKTOP_PASSWORD_MOUNT, "mode": "ro"},
                **course_volumes(desktops.sessions_dir, desktops.installation, session.courses),
            },
        )
        args["environment"]["DESKPOOL_SESSION_ID"] = str(session_id)
        if session.language:
            # The desktop's locale (deskpool-start): the person's language, where the image has it.
            args["environment"]["DESKPOOL_LANGUAGE"] = session.language
        return args

    def _clean_up_failed(
        self, session: DesiredSession, container: Container | None, attempt: _Attempt
    ) -> None:
        if container is not None:
            try:
                container.remove(force=True)
            except NotFound:
                pass
            except DockerException as error:
                logger.error("could not remove failed container %s: %s", container.name, error)
        shutil.rmtree(attempt.password_dir, ignore_errors=True)
        if attempt.created_volume:
            try:
                self._desktops.client.volumes.get(session.home_volume).remove()
            except DockerException as error:
                logger.error("could not remove volume %s: %s", session.home_volume, error)

    # -- stopping ------------------------------------------------------------------------

    def stop(self, session_id: int) -> None:
        # By label: also finds a container an older agent named deskpool-s<id>.
        for container in self._containers_of(session_id):
            self._desktops.remove(container, volumes=False)
        shutil.rmtree(self._desktops.sessions_dir / f"s{session_id}", ignore_errors=True)
        for key in self._desktops.claims.keys_of(session_id):
            self._warm.remove(key)

    # -- home files ----------------------------------------------------------------------

    def home_folder(self, home_volume: str, *, create: bool) -> Path | None:
        return self._desktops.home_folder(home_volume, create=create)

    # -- course folders (course_mounts) --------------------------------------------------

    def course_sources(self) -> set[Path]:
        """Course copies its desktops mount now (kept when older versions are pruned)."""
        desktops = self._desktops
        labels = [f"{k}={v}" for k, v in desktops.own_labels().items()]
        return mounted_sources(desktops.client, desktops.sessions_dir, labels)

    # -- the warm pool (docker_warm) -----------------------------------------------------

    def usage(self, containers: Sequence[ManagedContainer]) -> list[SessionUsage]:
        """Each running desktop's GPU and CPU use, and what its home holds where the disk
        bounds it (a statvfs of its image: cheap)."""
        homes = {c.session_id: c.home_volume for c in containers if c.home_volume}
        found = []
        for usage in self._usage.read(containers):
            volume = homes.get(usage.session_id)
            space = self._desktops.homes.space(volume) if volume else None
            if space is not None:
                usage = usage.model_copy(update={"home_used_bytes": space.used_bytes})
            found.append(usage)
        return found

    def list_warm(self) -> list[WarmContainer]:
        return self._warm.find()

    def start_warm(self, warm: DesiredWarm) -> WarmContainer:
        return self._warm.start(warm)

    def claim(self, key: str, session: DesiredSession) -> ManagedContainer:
        return self._warm.claim(key, session)

    def stop_warm(self, key: str) -> None:
        self._warm.remove(key)
