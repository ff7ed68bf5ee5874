"""Warm desktops as Docker containers: started for a class booking, claimed by a session.

A warm desktop is started before anyone asks: a random password in its own password folder
(``w<key>``, with the claim's two pipes), its home a shared host folder (``warm-homes/<key>``,
seeded with the image's skeleton) mounted with rslave propagation, labels
``deskpool.warm=<key>`` and ``deskpool.booking``. A claim mounts the student's home volume on
that folder (:mod:`~nodeagent.runtime.home_mounts`: it shows up in the running desktop),
writes the session's password into the password folder, has deskpool-claim run in the
container (Xvnc re-reads its password file at every authentication, and with the session's
language the X session is started again as the student's: their locale and input method,
their home's settings; Xvnc stays up), records the claim (:mod:`~nodeagent.runtime.claims`:
labels cannot change, and a restarted agent must still know whose desktop it is) and logs in
through websockify with the session's password: that proves the new password is in force
(the warm one no longer opens the desktop) before the desktop is reported RUNNING.

A class start claims dozens at once on a 2-core node, so a claim makes few engine calls
(``bench.agent --warm-together``): one inspect by the container's name (its labels checked:
this node's warm desktop of that key, running; it also gives the ports and limits the
report needs) and the home volume's look-up (and creation). deskpool-claim is asked for
through the password folder's pipes (:mod:`~nodeagent.runtime.claim_pipes`), not with a
``docker exec``, which was most of a claim's CPU on the node; a desktop that does not listen
for them (an older image or agent) is claimed with the exec (create, start, exit code). A
new home is seeded with the image's skeleton fetched at the warm start (kept per image id),
not fetched again.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import re
import secrets
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from docker.models.containers import Container
from docker.types import Mount
from websockets.asyncio.client import connect
from websockets.exceptions import WebSocketException

from nodeagent.protocol import (
    DESKTOP_HOME,
    DESKTOP_PASSWORD_MOUNT,
    LABEL_BOOKING,
    LABEL_COURSE,
    LABEL_INSTALLATION,
    LABEL_WARM,
    WARM_KEY_PATTERN,
    DesiredSession,
    DesiredWarm,
)
from nodeagent.readiness import DesktopNotReady, keep_trying
from nodeagent.rfb_login import RfbError, log_in_upstream
from nodeagent.runtime import claim_pipes, course_mounts, home_mounts
from nodeagent.runtime.base import (
    ManagedContainer,
    StartFailed,
    WarmContainer,
    warm_container_name,
)
from nodeagent.runtime.desktop_ports import published_port
from nodeagent.runtime.docker_desktops import (
    START_ERRORS,
    DesktopContainers,
    archive,
    memory_limit_mb,
    start_error_text,
)
from nodeagent.runtime.home_mounts import HomeMountError

logger = logging.getLogger(__name__)

WARM_HOMES_DIR_NAME = "warm-homes"  # under the sessions folder: warm desktops' home mounts
SKELETON = "/etc/skel"  # the image's skeleton home, copied into new homes
ORPHAN_AFTER_S = 300.0  # a warm home folder without its container this old is removed
UNCLAIMED_STOP_GRACE_S = 2  # an unclaimed warm desktop's stop: no user, nothing to save
# In the desktop images: applies a password written into the mounted folder after the start
# and, given --language, starts the X session again as the claimer's (claim_command).
CLAIM_COMMAND = ["/usr/local/bin/deskpool-claim"]
SKELETONS_KEPT = 8  # image skeletons kept for claims (a node runs a few images)
LOGIN_RETRY_S = 0.2
_WARM_KEY = re.compile(WARM_KEY_PATTERN)


class DockerWarmDesktops:
    """Start, list, claim and remove one node's warm desktops."""

    def __init__(self, desktops: DesktopContainers) -> None:
        self._desktops = desktops
        self._skeletons: dict[str, bytes] = {}  # image id: its /etc/skel as tar bytes

    def find(self) -> list[WarmContainer]:
        """This node's warm desktops, claimed or not, running or not."""
        desktops = self._desktops
        claims = desktops.claims.by_key()
        found = []
        for container in desktops.labelled(LABEL_WARM):
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
                    host=desktops.publish_address,
                    port=None,
                    exit_code=state.get("ExitCode"),
                    oom_killed=bool(state.get("OOMKilled")),
                    error=str(state.get("Error") or ""),
                    memory_limit_mb=memory_limit_mb(container.attrs),
                ).exit_reason()
            found.append(
                WarmContainer(
                    key=key,
                    container_id=container.id or "",
                    running=running,
                    status=str(state.get("Status", container.status)),
                    port=published_port(container.attrs),
                    booking=container.labels.get(LABEL_BOOKING, ""),
                    claimed_by=claim.session_id if claim is not None else None,
                    reason=reason,
                )
            )
        self._release_orphan_homes({w.key for w in found})
        course_mounts.release_orphans(
            self._desktops.sessions_dir, {w.key for w in found}, ORPHAN_AFTER_S
        )
        return found

    def start(self, warm: DesiredWarm) -> WarmContainer:
        desktops = self._desktops
        key = warm.key
        if not _WARM_KEY.match(key):
            raise StartFailed(f"unusable warm key {key!r}")
        desktops.require_image(warm.image)
        password_dir = self.password_dir(key)
        container: Container | None = None
        try:
            self.remove(key)  # a leftover of this key (crashed agent) would clash
            desktops.write_password(password_dir, secrets.token_urlsafe(6)[:8])
            claim_pipes.make(password_dir)  # the claim is asked for through these
            labels = {
                **desktops.own_labels(),
                LABEL_WARM: key,
                LABEL_BOOKING: str(warm.booking),
                LABEL_COURSE: warm.course,
            }
            args = desktops.limits_args(warm, f"warm {key}")
            home = self.home(key)
            home.mkdir(parents=True, exist_ok=True, mode=0o755)
            args.update(
                name=warm_container_name(desktops.node, key, desktops.installation),
                labels=labels,
                volumes={
                    **args["volumes"],  # a share's MPS pipe folder (limits_args)
                    str(password_dir): {"bind": DESKTOP_PASSWORD_MOUNT, "mode": "ro"},
                },
                mounts=[
                    Mount(DESKTOP_HOME, str(home), type="bind", propagation="rslave"),
                    course_mounts.warm_mount(desktops.sessions_dir, key),  # /courses
                ],
            )
            args["environment"]["DESKPOOL_WARM_KEY"] = key
            container = desktops.client.containers.create(**args)
            home_mounts.prepare(home, self._skeleton(container))
            container.start()
            port = desktops.await_desktop(container)
        except (*START_ERRORS, HomeMountError) as error:
            self.remove(key)
            raise StartFailed(start_error_text(error), code=getattr(error, "code", "")) from error
        except BaseException:
            self.remove(key)
            raise
        return WarmContainer(
            key=key,
            container_id=container.id or "",
            running=True,
            status="running",
            port=port,
            booking=str(warm.booking),
        )

    def claim(self, key: str, session: DesiredSession) -> ManagedContainer:
        desktops = self._desktops
        try:
            container = self._running(key)
            self._attach_home(key, container, session)
            course_mounts.attach_warm(
                desktops.sessions_dir, desktops.installation, key, session.courses
            )
            desktops.replace_password(self.password_dir(key), session.vnc_password)
            self._apply_claim(key, container, session)
            desktops.claims.write(key, session)
            port = published_port(container.attrs)
            if port is None:
                raise StartFailed("the engine published no port for websockify")
            login = functools.partial(wait_for_login, password=session.vnc_password)
            desktops.await_answer(container, port, check=login)
        except (*START_ERRORS, HomeMountError) as error:
            self.remove(key)
            raise StartFailed(start_error_text(error), code=getattr(error, "code", "")) from error
        except BaseException:
            self.remove(key)
            raise
        logger.info("session %s: claimed warm desktop %s", session.session_id, key)
        # The inspect above is the state to report: the login just proved it running.
        described = desktops.describe(container)
        assert described is not None  # the claim record was just written
        return described

    def _apply_claim(self, key: str, container: Container, session: DesiredSession) -> None:
        """deskpool-claim in the desktop: asked for through its pipes (no engine call), or,
        where it does not listen for them, run with ``docker exec``; StartFailed unless it
        succeeded."""
        status = claim_pipes.ask(self.password_dir(key), session.language)
        if status is None:
            applied = container.exec_run(claim_command(session))
            status = applied.exit_code
            said = (applied.output or b"").decode(errors="replace").strip()[:120]
        else:
            said = "its words are in the desktop's log"
        if status != 0:
            raise StartFailed(
                f"warm desktop {key}: the claim was not applied (exit code {status}: {said})"
            )

    def _running(self, key: str) -> Container:
        """Warm desktop ``key``'s container, by its name (one engine call): this node's and
        installation's, labelled with that key, running; else StartFailed."""
        desktops = self._desktops
        container = desktops.named(warm_container_name(desktops.node, key, desktops.installation))
        labels = {} if container is None else (container.labels or {})
        wanted = {**desktops.own_labels(), LABEL_WARM: key}
        if (
            container is None
            or any(labels.get(label) != value for label, value in wanted.items())
            or (LABEL_INSTALLATION in labels and not desktops.installation)
        ):
            raise StartFailed(f"warm desktop {key} is gone")
        if container.status != "running":
            raise StartFailed(f"warm desktop {key} is not running ({container.status})")
        return container

    def containers(self, key: str) -> list[Container]:
        """The containers of warm desktop ``key``: by label, plus one by name without them."""
        found = {c.id: c for c in self._desktops.labelled(f"{LABEL_WARM}={key}")}
        desktops = self._desktops
        named = desktops.named(warm_container_name(desktops.node, key, desktops.installation))
        if named is not None:
            found.setdefault(named.id, named)
        return list(found.values())

    def remove(self, key: str) -> None:
        """Remove the warm desktop ``key``: containers, home mount, password folder, claim."""
        # A claimed one is a session's desktop: the full grace, its save hooks write to the
        # student's home (still mounted). An unclaimed one has nothing to save.
        claimed = self._desktops.claims.get(key) is not None
        for container in self.containers(key):
            self._desktops.remove(
                container,
                volumes=True,
                force=True,
                grace_s=None if claimed else UNCLAIMED_STOP_GRACE_S,
            )
        home_mounts.release(self.home(key))  # unmounts first: the volume is kept
        course_mounts.release_warm(self._desktops.sessions_dir, key)
        shutil.rmtree(self.password_dir(key), ignore_errors=True)
        self._desktops.claims.remove(key)

    def home(self, key: str) -> Path:
        return self._desktops.sessions_dir / WARM_HOMES_DIR_NAME / key

    def password_dir(self, key: str) -> Path:
        return self._desktops.sessions_dir / f"w{key}"

    def _attach_home(self, key: str, container: Container, session: DesiredSession) -> None:
        """Mount the student's home volume into the running warm desktop (a new volume is
        first seeded with the image's skeleton, as Docker seeds one at a cold start)."""
        desktops = self._desktops
        volume, created = desktops.ensure_volume(
            session.home_volume, session.user, session.home_quota_mb
        )
        volume_dir = desktops.home_dir(volume)  # a shared home's folder, or the Mountpoint
        # Only an empty one: a shared home made on another node keeps what its owner deleted.
        if created and volume_dir.is_dir() and not any(volume_dir.iterdir()):
            home_mounts.seed(volume_dir, self._skeleton(container))
        home_mounts.attach(volume_dir, self.home(key))

    def _skeleton(self, container: Container) -> bytes:
        """The image's /etc/skel as tar bytes, fetched from a container once per image."""
        image = str(container.attrs.get("Image") or "")
        skeleton = self._skeletons.get(image) if image else None
        if skeleton is None:
            skeleton = archive(container, SKELETON)
            if image:
                if len(self._skeletons) >= SKELETONS_KEPT:
                    self._skeletons.clear()
                self._skeletons[image] = skeleton
        return skeleton

    def _release_orphan_homes(self, keys: set[str]) -> None:
        """Unmount and remove home folders of warm desktops whose container is gone (removed
        by hand, or by a crash between the two); a folder younger than ORPHAN_AFTER_S may
        belong to a start in progress and is left alone."""
        homes = self._desktops.sessions_dir / WARM_HOMES_DIR_NAME
        if not homes.is_dir():
            return
        for folder in homes.iterdir():
            if folder.name in keys:
                continue
            with contextlib.suppress(FileNotFoundError):
                if time.time() - folder.stat().st_mtime > ORPHAN_AFTER_S:
                    logger.warning("removing the home folder of gone warm desktop %s", folder.name)
                    home_mounts.release(folder)


def claim_command(session: DesiredSession) -> list[str]:
    """deskpool-claim for ``session``: its password, and its X session restarted under its
    language ("" too: the image's default; the restart also makes the session read the
    student's home, mounted just before)."""
    return [*CLAIM_COMMAND, "--language", session.language]


def wait_for_login(
    host: str,
    port: int,
    timeout_s: float,
    *,
    password: str,
    abort_reason: Callable[[], str | None] | None = None,
) -> None:
    """Log in to the desktop's VNC server through websockify with ``password``, retried
    (:func:`~nodeagent.readiness.keep_trying`) while it does not answer; a refusal (the
    password is not in force) or a broken handshake fails at once."""
    url = f"ws://{host}:{port}/websockify"
    try:
        keep_trying(
            lambda attempt_s: asyncio.run(_log_in(url, password, attempt_s)),
            f"no VNC login on {host}:{port}",
            timeout_s,
            retry_on=(OSError, WebSocketException, TimeoutError),
            interval_s=LOGIN_RETRY_S,
            abort_reason=abort_reason,
        )
    except (RfbError, ValueError) as error:  # ValueError: a password VNC cannot carry
        raise DesktopNotReady(f"VNC login through websockify failed: {error}") from error


async def _log_in(url: str, password: str, timeout_s: float) -> None:
    async with asyncio.timeout(timeout_s):
        async with connect(url, compression=None, open_timeout=None, close_timeout=1) as ws:
            await log_in_upstream(ws, password)
