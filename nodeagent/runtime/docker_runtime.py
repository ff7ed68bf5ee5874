"""Desktops as Docker containers, through the Docker SDK.

One container per session, named ``deskpool-<node>-s<session_id>`` (several agents may
share one engine, as in the demo) and labelled with the ``deskpool.*`` keys from
:mod:`nodeagent.protocol`, so a restarted agent finds (adopts) what it started before:
by label, never by name. The home volume outlives the container; the VNC password
lives in a file under the state directory, bind-mounted read-only, never in the
environment (it would show in ``docker inspect``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import secrets
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
from docker.errors import APIError, DockerException, ImageNotFound, NotFound
from docker.models.containers import Container
from docker.types import Mount

from nodeagent.config import AgentConfig
from nodeagent.protocol import (
    DESKTOP_HOME,
    DESKTOP_PASSWORD_MOUNT,
    DESKTOP_WEBSOCKIFY_PORT,
    LABEL_BOOKING,
    LABEL_COURSE,
    LABEL_MANAGED,
    LABEL_NODE,
    LABEL_PLACEMENT,
    LABEL_SESSION,
    LABEL_USER,
    LABEL_WARM,
    WARM_KEY_PATTERN,
    DesiredSession,
    DesiredWarm,
)
from nodeagent.readiness import DesktopNotReady, wait_for_desktop
from nodeagent.runtime import (
    ManagedContainer,
    RuntimeKind,
    RuntimeUnavailable,
    StartFailed,
    WarmContainer,
    container_name,
    home_mounts,
    warm_container_name,
)
from nodeagent.runtime.home_mounts import HomeMountError

logger = logging.getLogger(__name__)

PASSWORD_FILE_NAME = "passwd"
WARM_HOMES_DIR_NAME = "warm-homes"  # under the sessions folder: warm desktops' home mounts
SKELETON = "/etc/skel"  # the image's skeleton home, copied into new homes
ORPHAN_AFTER_S = 300.0  # a warm home folder without its container this old is removed
# In the desktop images: applies a password written into the mounted folder after the start.
APPLY_PASSWORD_COMMAND = ["/usr/local/bin/deskpool-passwd"]
CLAIMS_DIR_NAME = "claims"
_WARM_KEY = re.compile(WARM_KEY_PATTERN)
DESKTOP_USER = "1000:1000"
_PORT_KEY = f"{DESKTOP_WEBSOCKIFY_PORT}/tcp"

ReadinessCheck = Callable[..., object]


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


@dataclass
class _Attempt:
    """What one start attempt created, so a failure removes exactly that."""

    password_dir: Path
    created_volume: bool = False


class DockerRuntime:
    """Starts, lists and stops one node's desktop containers."""

    kind: RuntimeKind = "docker"

    def __init__(
        self,
        client: docker.DockerClient,
        *,
        node_name: str,
        sessions_dir: Path,
        publish_address: str = "127.0.0.1",
        stop_grace_s: float = 10.0,
        ready_timeout_s: float = 60.0,
        readiness: ReadinessCheck = wait_for_desktop,
    ) -> None:
        self._client = client
        self._node = node_name
        self._sessions_dir = sessions_dir.resolve()
        self._publish_address = publish_address
        self._stop_grace_s = stop_grace_s
        self._ready_timeout_s = ready_timeout_s
        self._readiness = readiness
        self.gpu_enabled = nvidia_runtime_available(client)
        if not self.gpu_enabled:
            logger.warning(
                "Docker has no 'nvidia' runtime on node %s: desktops start WITHOUT a GPU "
                "(their GPU slice is simulated).",
                node_name,
            )

    @classmethod
    def from_config(cls, config: AgentConfig, client: docker.DockerClient) -> DockerRuntime:
        return cls(
            client,
            node_name=config.node_name,
            sessions_dir=config.sessions_dir(),
            publish_address=config.publish_address,
            stop_grace_s=config.stop_grace_s,
            ready_timeout_s=config.ready_timeout_s,
        )

    # -- listing -------------------------------------------------------------------------

    def _label_filter(self, session_id: int | None = None) -> dict[str, Any]:
        labels = [f"{LABEL_MANAGED}=true", f"{LABEL_NODE}={self._node}"]
        if session_id is not None:
            labels.append(f"{LABEL_SESSION}={session_id}")
        return {"label": labels}

    def _containers_of(self, session_id: int) -> list[Container]:
        """This node's containers of one session: by label, plus one by name without them,
        plus a warm desktop it claimed."""
        found = {
            c.id: c
            for c in self._client.containers.list(all=True, filters=self._label_filter(session_id))
        }
        with contextlib.suppress(NotFound):
            named = self._client.containers.get(container_name(self._node, session_id))
            found.setdefault(named.id, named)
        for key in self._claimed_keys(session_id):
            for container in self._warm_containers(key):
                found.setdefault(container.id, container)
        return list(found.values())

    def list_managed(self) -> list[ManagedContainer]:
        found = []
        claims = self._claims()
        for container in self._client.containers.list(all=True, filters=self._label_filter()):
            managed = self._describe(container, claims)
            if managed is not None:
                found.append(managed)
        return found

    def _describe(
        self, container: Container, claims: dict[str, dict[str, Any]] | None = None
    ) -> ManagedContainer | None:
        placement = container.labels.get(LABEL_PLACEMENT, "")
        if key := container.labels.get(LABEL_WARM):
            # A warm desktop is a session's only once claimed; labels cannot change, so the
            # session comes from the agent's claim record.
            claim = (self._claims() if claims is None else claims).get(key)
            if claim is None:
                return None
            session_id = int(claim["session_id"])
            placement = str(claim.get("placement", ""))
        else:
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
            host=self._publish_address,
            port=_published_port(container.attrs),
            exit_code=None if running else state.get("ExitCode"),
            oom_killed=bool(state.get("OOMKilled")),
            error=str(state.get("Error") or ""),
            placement=placement,
            memory_limit_mb=_memory_limit_mb(container.attrs),
        )

    # -- starting ------------------------------------------------------------------------

    def start(self, session: DesiredSession) -> ManagedContainer:
        session_id = session["session_id"]
        self._require_image(session["image"])
        attempt = _Attempt(password_dir=self._sessions_dir / f"s{session_id}")
        container: Container | None = None
        try:
            self._remove_stale(session_id)
            attempt.created_volume = self._ensure_home_volume(session)
            self._write_password(attempt.password_dir, session["vnc_password"])
            container = self._client.containers.create(**self._create_args(session, attempt))
            container.start()
            self._await_desktop(container)
            container.reload()
        except (DockerException, OSError, DesktopNotReady, StartFailed) as error:
            self._clean_up_failed(session, container, attempt)
            raise StartFailed(_start_error_text(error)) from error
        except BaseException:
            self._clean_up_failed(session, container, attempt)
            raise
        described = self._describe(container)
        assert described is not None  # we set the session label ourselves
        return described

    def _await_desktop(self, container: Container) -> int:
        """The started container's websockify port, once a VNC handshake answers there."""
        container.reload()
        port = _published_port(container.attrs)
        if port is None:
            raise StartFailed("the engine published no port for websockify")
        self._readiness(
            _connect_host(self._publish_address),
            port,
            self._ready_timeout_s,
            abort_reason=lambda: self._exit_reason(container),
        )
        return port

    def wait_ready(self, managed: ManagedContainer) -> ManagedContainer:
        """Wait for a container found running (adopted) to answer a VNC handshake."""
        try:
            container = self._client.containers.get(managed.container_id)
            if managed.port is None:
                raise StartFailed("the desktop container publishes no websockify port")
            self._readiness(
                _connect_host(self._publish_address),
                managed.port,
                self._ready_timeout_s,
                abort_reason=lambda: self._exit_reason(container),
            )
        except (DockerException, OSError, DesktopNotReady) as error:
            raise StartFailed(_start_error_text(error)) from error
        return managed

    def _require_image(self, image: str) -> None:
        try:
            self._client.images.get(image)
        except ImageNotFound:
            # No registry is reachable from the nodes: images are built locally.
            raise StartFailed(f"image {image} is not present on node {self._node}") from None
        except DockerException as error:
            raise StartFailed(f"cannot look up image {image}: {error}") from error

    def _remove_stale(self, session_id: int) -> None:
        # A leftover of this session (crashed agent; or one of the same name whose labels
        # were removed) would block the create or run twice.
        for container in self._containers_of(session_id):
            with contextlib.suppress(NotFound):
                container.remove(force=True)

    def _ensure_home_volume(self, session: DesiredSession) -> bool:
        """Create the home volume unless it exists; True when this call created it."""
        name = session["home_volume"]
        try:
            self._client.volumes.get(name)
            return False
        except NotFound:
            pass
        self._client.volumes.create(
            name=name,
            labels={
                LABEL_MANAGED: "true",
                LABEL_USER: session["user"],
                LABEL_NODE: self._node,
            },
        )
        return True

    def _write_password(self, directory: Path, password: str) -> None:
        # The parent is root-only (0700) so host users cannot read passwords; the container
        # only sees the mounted session folder, which uid 1000 must be able to read.
        self._sessions_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(self._sessions_dir, 0o700)
        shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir(mode=0o755)
        os.chmod(directory, 0o755)
        password_file = directory / PASSWORD_FILE_NAME
        password_file.write_text(password[:8] + "\n")
        os.chmod(password_file, 0o444)

    def _create_args(self, session: DesiredSession, attempt: _Attempt) -> dict[str, Any]:
        session_id = session["session_id"]
        labels = {
            LABEL_MANAGED: "true",
            LABEL_SESSION: str(session_id),
            LABEL_USER: session["user"],
            LABEL_NODE: self._node,
            LABEL_COURSE: session["course"],
        }
        if placement := session.get("placement"):
            labels[LABEL_PLACEMENT] = placement
        args = self._limits_args(session, f"session {session_id}")
        args.update(
            name=container_name(self._node, session_id),
            labels=labels,
            volumes={
                session["home_volume"]: {"bind": DESKTOP_HOME, "mode": "rw"},
                str(attempt.password_dir): {"bind": DESKTOP_PASSWORD_MOUNT, "mode": "ro"},
            },
        )
        args["environment"]["DESKPOOL_SESSION_ID"] = str(session_id)
        return args

    def _limits_args(self, spec: DesiredSession | DesiredWarm, what: str) -> dict[str, Any]:
        """Image, limits, lockdown, published port and GPU: what every desktop shares."""
        environment: dict[str, str] = {}
        args: dict[str, Any] = {
            "image": spec["image"],
            "detach": True,
            "nano_cpus": int(spec["cpus"] * 1_000_000_000),
            "mem_limit": f"{spec['memory_mb']}m",
            "pids_limit": spec["pids_limit"],
            "shm_size": f"{spec['shm_mb']}m",
            "cap_drop": ["ALL"],
            "security_opt": ["no-new-privileges"],
            "user": DESKTOP_USER,
            "ports": {_PORT_KEY: (self._publish_address, None)},
            "environment": environment,
        }
        devices = spec["gpu_devices"]
        if devices and self.gpu_enabled:
            args["runtime"] = "nvidia"
            environment["NVIDIA_VISIBLE_DEVICES"] = ",".join(devices)
            environment["NVIDIA_DRIVER_CAPABILITIES"] = "compute,utility,graphics"
        else:
            # "void": an image that defaults to "all" (CUDA bases do) must not see any GPU.
            environment["NVIDIA_VISIBLE_DEVICES"] = "void"
            if devices:
                environment["DESKPOOL_SIMULATED_GPU_DEVICES"] = ",".join(devices)
                logger.info(
                    "%s: no NVIDIA runtime, GPU slice %s is simulated", what, ",".join(devices)
                )
        return args

    def _exit_reason(self, container: Container) -> str | None:
        try:
            container.reload()
        except DockerException as error:
            return f"container vanished while starting: {error}"
        described = self._describe(container)
        if described is None or described.running:
            return None
        return described.exit_reason() + _log_tail(container)

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
                self._client.volumes.get(session["home_volume"]).remove()
            except DockerException as error:
                logger.error("could not remove volume %s: %s", session["home_volume"], error)

    # -- stopping ------------------------------------------------------------------------

    def stop(self, session_id: int) -> None:
        # By label: also finds a container an older agent named deskpool-s<id>.
        for container in self._containers_of(session_id):
            try:
                if container.status == "running":
                    container.stop(timeout=int(self._stop_grace_s))
                container.remove(v=False)
            except NotFound:
                pass
            except APIError as error:
                if error.status_code != 409:  # 409: removal already in progress
                    raise
        shutil.rmtree(self._sessions_dir / f"s{session_id}", ignore_errors=True)
        for key in self._claimed_keys(session_id):
            self._forget_warm(key)

    # -- the warm pool -------------------------------------------------------------------
    #
    # A warm desktop is started for a class booking before anyone asks: a random password
    # in its own password folder (``w<key>``), its home a shared host folder
    # (``warm-homes/<key>``, seeded with the image's skeleton) mounted with rslave
    # propagation, labels ``deskpool.warm=<key>`` and ``deskpool.booking``. A claim mounts
    # the student's home volume on that folder (``home_mounts``: it shows up in the running
    # desktop), writes the session's password into the password folder, runs
    # deskpool-passwd in the container (Xvnc
    # re-reads its password file at every authentication) and records the claim in
    # ``claims/<key>.json`` under the sessions folder: labels cannot change, and a restarted
    # agent must still know whose desktop it is.

    def list_warm(self) -> list[WarmContainer]:
        claims = self._claims()
        found = []
        filters = {"label": [f"{LABEL_MANAGED}=true", f"{LABEL_NODE}={self._node}", LABEL_WARM]}
        for container in self._client.containers.list(all=True, filters=filters):
            key = container.labels.get(LABEL_WARM, "")
            state = container.attrs.get("State", {})
            running = bool(state.get("Running"))
            claim = claims.get(key)
            reason = ""
            if not running:
                reason = ManagedContainer(
                    session_id=0,
                    container_id=container.id or "",
                    running=False,
                    status=str(state.get("Status", container.status)),
                    host=self._publish_address,
                    port=None,
                    exit_code=state.get("ExitCode"),
                    oom_killed=bool(state.get("OOMKilled")),
                    error=str(state.get("Error") or ""),
                    memory_limit_mb=_memory_limit_mb(container.attrs),
                ).exit_reason()
            found.append(
                WarmContainer(
                    key=key,
                    container_id=container.id or "",
                    running=running,
                    status=str(state.get("Status", container.status)),
                    port=_published_port(container.attrs),
                    booking=container.labels.get(LABEL_BOOKING, ""),
                    claimed_by=int(claim["session_id"]) if claim is not None else None,
                    reason=reason,
                )
            )
        self._release_orphan_homes({w.key for w in found})
        return found

    def start_warm(self, warm: DesiredWarm) -> WarmContainer:
        key = warm["key"]
        if not _WARM_KEY.match(key):
            raise StartFailed(f"unusable warm key {key!r}")
        self._require_image(warm["image"])
        password_dir = self._warm_dir(key)
        container: Container | None = None
        try:
            self._forget_warm(key)  # a leftover of this key (crashed agent) would clash
            self._write_password(password_dir, secrets.token_urlsafe(6)[:8])
            labels = {
                LABEL_MANAGED: "true",
                LABEL_NODE: self._node,
                LABEL_WARM: key,
                LABEL_BOOKING: str(warm["booking"]),
                LABEL_COURSE: warm["course"],
            }
            args = self._limits_args(warm, f"warm {key}")
            home = self._warm_home(key)
            home.mkdir(parents=True, exist_ok=True, mode=0o755)
            args.update(
                name=warm_container_name(self._node, key),
                labels=labels,
                volumes={str(password_dir): {"bind": DESKTOP_PASSWORD_MOUNT, "mode": "ro"}},
                mounts=[Mount(DESKTOP_HOME, str(home), type="bind", propagation="rslave")],
            )
            args["environment"]["DESKPOOL_WARM_KEY"] = key
            container = self._client.containers.create(**args)
            home_mounts.prepare(home, _archive(container, SKELETON))
            container.start()
            port = self._await_desktop(container)
        except (DockerException, OSError, DesktopNotReady, StartFailed, HomeMountError) as error:
            self._forget_warm(key)
            raise StartFailed(_start_error_text(error)) from error
        except BaseException:
            self._forget_warm(key)
            raise
        return WarmContainer(
            key=key,
            container_id=container.id or "",
            running=True,
            status="running",
            port=port,
            booking=str(warm["booking"]),
        )

    def claim(self, key: str, session: DesiredSession) -> ManagedContainer:
        session_id = session["session_id"]
        try:
            containers = [c for c in self._warm_containers(key) if c.status == "running"]
            if not containers:
                raise StartFailed(f"warm desktop {key} is not running")
            [container] = containers[:1]
            self._attach_home(key, container, session)
            self._replace_password(self._warm_dir(key), session["vnc_password"])
            applied = container.exec_run(APPLY_PASSWORD_COMMAND)
            if applied.exit_code != 0:
                output = (applied.output or b"").decode(errors="replace").strip()
                raise StartFailed(
                    f"warm desktop {key}: the new password was not applied "
                    f"(exit code {applied.exit_code}: {output[:120]})"
                )
            self._write_claim(key, session)
            self._await_desktop(container)
            container.reload()
        except (DockerException, OSError, DesktopNotReady, StartFailed, HomeMountError) as error:
            self._forget_warm(key)
            raise StartFailed(_start_error_text(error)) from error
        except BaseException:
            self._forget_warm(key)
            raise
        logger.info("session %s: claimed warm desktop %s", session_id, key)
        described = self._describe(container)
        assert described is not None  # the claim record was just written
        return described

    def stop_warm(self, key: str) -> None:
        self._forget_warm(key)

    def _attach_home(self, key: str, container: Container, session: DesiredSession) -> None:
        """Mount the student's home volume into the running warm desktop (a new volume is
        first seeded with the image's skeleton, as Docker seeds one at a cold start)."""
        created = self._ensure_home_volume(session)
        volume = self._client.volumes.get(session["home_volume"])
        volume_dir = Path(volume.attrs.get("Mountpoint") or "")
        if created and volume_dir.is_dir():
            home_mounts.seed(volume_dir, _archive(container, SKELETON))
        home_mounts.attach(volume_dir, self._warm_home(key))

    def _release_orphan_homes(self, keys: set[str]) -> None:
        """Unmount and remove home folders of warm desktops whose container is gone (removed
        by hand, or by a crash between the two); a folder younger than ORPHAN_AFTER_S may
        belong to a start in progress and is left alone."""
        homes = self._sessions_dir / WARM_HOMES_DIR_NAME
        if not homes.is_dir():
            return
        for folder in homes.iterdir():
            if folder.name in keys:
                continue
            with contextlib.suppress(FileNotFoundError):
                if time.time() - folder.stat().st_mtime > ORPHAN_AFTER_S:
                    logger.warning("removing the home folder of gone warm desktop %s", folder.name)
                    home_mounts.release(folder)

    def _warm_home(self, key: str) -> Path:
        return self._sessions_dir / WARM_HOMES_DIR_NAME / key

    def _warm_dir(self, key: str) -> Path:
        return self._sessions_dir / f"w{key}"

    def _warm_containers(self, key: str) -> list[Container]:
        labels = [f"{LABEL_MANAGED}=true", f"{LABEL_NODE}={self._node}", f"{LABEL_WARM}={key}"]
        found = {c.id: c for c in self._client.containers.list(all=True, filters={"label": labels})}
        with contextlib.suppress(NotFound):
            named = self._client.containers.get(warm_container_name(self._node, key))
            found.setdefault(named.id, named)
        return list(found.values())

    def _forget_warm(self, key: str) -> None:
        """Remove the warm desktop ``key``: containers, password folder, claim record."""
        for container in self._warm_containers(key):
            try:
                # tini -g stops the desktop in about 0.3 s on SIGTERM.
                if container.status == "running":
                    container.stop(timeout=int(self._stop_grace_s))
                container.remove(v=True, force=True)
            except NotFound:
                pass
            except APIError as error:
                if error.status_code != 409:
                    raise
        home_mounts.release(self._warm_home(key))  # unmounts first: the volume is kept
        shutil.rmtree(self._warm_dir(key), ignore_errors=True)
        with contextlib.suppress(FileNotFoundError):
            (self._claims_dir() / f"{key}.json").unlink()

    def _replace_password(self, directory: Path, password: str) -> None:
        """Swap the password file of a running desktop (a rename: never half written)."""
        if not directory.is_dir():
            raise StartFailed(f"password folder {directory} is missing")
        temporary = directory / f".{PASSWORD_FILE_NAME}.new"
        temporary.write_text(password[:8] + "\n")
        os.chmod(temporary, 0o444)
        temporary.replace(directory / PASSWORD_FILE_NAME)

    def _claims_dir(self) -> Path:
        return self._sessions_dir / CLAIMS_DIR_NAME

    def _write_claim(self, key: str, session: DesiredSession) -> None:
        directory = self._claims_dir()
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        record = {
            "key": key,
            "session_id": session["session_id"],
            "placement": session.get("placement", ""),
            "user": session["user"],
            "course": session["course"],
        }
        temporary = directory / f".{key}.json.new"
        temporary.write_text(json.dumps(record))
        temporary.replace(directory / f"{key}.json")

    def _claims(self) -> dict[str, dict[str, Any]]:
        """Claim records by warm key (unreadable ones are skipped, with a warning)."""
        claims: dict[str, dict[str, Any]] = {}
        directory = self._claims_dir()
        if not directory.is_dir():
            return claims
        for path in directory.glob("*.json"):
            try:
                record = json.loads(path.read_text())
                claims[path.stem] = {**record, "session_id": int(record["session_id"])}
            except FileNotFoundError:
                continue  # removed meanwhile
            except (OSError, ValueError, KeyError, TypeError) as error:
                logger.warning("ignoring unreadable claim record %s: %s", path, error)
        return claims

    def _claimed_keys(self, session_id: int) -> list[str]:
        return [k for k, c in self._claims().items() if c["session_id"] == session_id]


def _archive(container: Container, path: str) -> bytes:
    """A folder of the container's image (or filesystem) as tar bytes."""
    stream, _ = container.get_archive(path)
    return b"".join(stream)


def _published_port(attrs: dict[str, Any]) -> int | None:
    bindings = (attrs.get("NetworkSettings", {}).get("Ports") or {}).get(_PORT_KEY) or []
    for binding in bindings:
        if binding.get("HostPort"):
            return int(binding["HostPort"])
    return None


def _memory_limit_mb(attrs: dict[str, Any]) -> int | None:
    limit = (attrs.get("HostConfig") or {}).get("Memory") or 0
    return int(limit) // (1024 * 1024) or None


def _connect_host(publish_address: str) -> str:
    # Published on every interface: the loopback reaches it from the agent.
    return "127.0.0.1" if publish_address in ("0.0.0.0", "", "::") else publish_address


def _log_tail(container: Container, lines: int = 5) -> str:
    try:
        tail = container.logs(tail=lines).decode(errors="replace").strip()
    except DockerException:
        return ""
    return f"; last output: {tail}" if tail else ""


def _start_error_text(error: BaseException) -> str:
    if isinstance(error, APIError):
        return f"the Docker engine refused the desktop: {error.explanation or error}"
    return str(error)
