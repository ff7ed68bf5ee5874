"""The students' home volumes of one node: made, found, carried into a disk-bounded image.

Three kinds of home (docs/deploy.md "Home quotas"):

* with a homes folder (``DESKPOOL_HOMES_DIR``; the agent's default) and a quota, a home is a
  loop-mounted ext4 image (:mod:`~nodeagent.runtime.home_images`) and its volume a bind of
  the mount: the disk enforces the quota. A plain volume made before (an older agent) is
  carried into an image at its next start, its files copied whole, then the volume is made
  again, of the same name, as a bind of the mount;
* with a home root (``DESKPOOL_HOME_ROOT``, shared by the nodes) a home is a folder there
  and its volume a bind of it. A loop image on a shared file system would be corrupted by
  two nodes mounting it, so the quota is the file server's to enforce (XFS project quotas on
  the export); this node says once that it does not;
* otherwise (no homes folder, or a quota of 0: none) a plain engine volume, bounded by
  nothing but the node's disk.

:meth:`HomeVolumes.ensure` is the one way a home is made (a start, a warm claim, the Files
page's first upload, the migration of renamed volumes).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import docker
from docker.errors import DockerException, NotFound

from nodeagent.protocol import DESKTOP_GID, DESKTOP_UID, LABEL_INSTALLATION, LABEL_USER
from nodeagent.runtime import home_images
from nodeagent.runtime.base import StartFailed, home_folder_name, refuse_foreign_home
from nodeagent.runtime.home_images import HomeImageError, HomeSpace

logger = logging.getLogger(__name__)

LOST_AND_FOUND = "lost+found"


class HomeVolumes:
    """A node's home volumes on its engine: see the module's docstring."""

    def __init__(
        self,
        client: docker.DockerClient,
        *,
        node: str,
        labels: Callable[[], dict[str, str]],
        home_root: Path | None = None,
        homes_dir: Path | None = None,
        default_quota_mb: int = 0,
    ) -> None:
        self.client = client
        self.node = node
        self._labels = labels  # the node's own labels (they carry the installation, set late)
        self.home_root = home_root
        self.homes_dir = homes_dir.resolve() if homes_dir is not None else None
        self.default_quota_mb = default_quota_mb
        self._warned: set[str] = set()
        self._locks: dict[str, threading.RLock] = {}  # one per home (:meth:`ensure`)
        self._locks_guard = threading.Lock()
        if home_root is not None:
            logger.warning(
                "homes of node %s are folders of the shared home root %s: this node does not "
                "bound their size; the file server's quota must (docs/deploy.md)",
                node,
                home_root,
            )
        elif self.homes_dir is not None and os.geteuid() != 0:
            logger.warning(
                "the agent of node %s does not run as root: it cannot mount home images, and "
                "its homes are plain volumes that NOTHING BUT THE DISK BOUNDS (run it as root, "
                "or set DESKPOOL_HOME_IMAGES=off to say so; docs/deploy.md)",
                node,
            )
            self.homes_dir = None
        elif self.homes_dir is not None:
            mounted = home_images.mount_all(self.homes_dir)
            if mounted:
                logger.info("mounted %d home image(s) of %s", len(mounted), self.homes_dir)
            # The first homes of the node's quota are then made without a resize
            # (a few tens of milliseconds, once per agent process).
            home_images.learn_size(self.homes_dir, default_quota_mb)

    @property
    def disk_enforced(self) -> bool:
        """Whether this node's homes are bounded by their disk (loop images)."""
        return self.home_root is None and self.homes_dir is not None

    def quota_of(self, quota_mb: int | None) -> int:
        return self.default_quota_mb if quota_mb is None else quota_mb

    # -- making --------------------------------------------------------------------------

    def ensure(self, name: str, user: str = "", quota_mb: int | None = None) -> tuple[Any, bool]:
        """The home volume ``name`` (``user`` for its label), made unless it exists, its
        image mounted and grown to ``quota_mb`` (None: the node's default; 0: no quota);
        and whether this call made the volume. One home at a time: a start, a claim and the
        Files page never make or mount the same image at once."""
        with self._lock_of(name):
            return self._ensure(name, user, quota_mb)

    def _lock_of(self, name: str) -> threading.RLock:
        with self._locks_guard:
            return self._locks.setdefault(name, threading.RLock())

    def _ensure(self, name: str, user: str, quota_mb: int | None) -> tuple[Any, bool]:
        volume = self._volume(name)
        if self.home_root is not None:
            return self._ensure_shared(name, user, volume)
        quota = self.quota_of(quota_mb)
        image = self.homes_dir is not None and home_images.image_path(self.homes_dir, name)
        if self.homes_dir is None or (not quota and not (image and image.exists())):
            if volume is not None:
                return volume, False
            return self.client.volumes.create(name=name, labels=self._volume_labels(user)), True
        point = home_images.mount_point(self.homes_dir, name)
        if volume is not None:
            if self.home_dir(volume) == point:
                home_images.attach(self.homes_dir, name, quota, idle=not self._users(name))
                return volume, False
            return self._carry(volume, quota), False
        home_images.create(self.homes_dir, name, quota)
        _drop_lost_and_found(point)
        return self._bind(name, point, self._volume_labels(user)), True

    def _ensure_shared(self, name: str, user: str, volume: Any) -> tuple[Any, bool]:
        if volume is not None:
            self._warn_unshared(volume)
            return volume, False
        folder = self.shared_home(name)
        make_home_folder(folder)
        return self._bind(name, folder, self._volume_labels(user)), True

    def _carry(self, volume: Any, quota_mb: int) -> Any:
        """Carry an older plain volume's files into a new image and make the volume a bind
        of it; the volume as it is when it cannot be (in use, not plain, or a failure)."""
        assert self.homes_dir is not None
        name = volume.name
        if (volume.attrs.get("Options") or {}) or volume.attrs.get("Driver") != "local":
            self._warn_once(name, "is not a plain local volume: used as it is, unbounded")
            return volume
        if self._users(name, stopped=True):
            self._warn_once(name, "is in use: carried into a bounded image at its next start")
            return volume
        source = Path(volume.attrs.get("Mountpoint") or "")
        point = home_images.mount_point(self.homes_dir, name)
        try:
            # An image left by a carry-over cut short: the volume still holds everything.
            home_images.remove(self.homes_dir, name)
            home_images.create(self.homes_dir, name, home_images.size_for(source, quota_mb))
            _drop_lost_and_found(point)
            home_images.carry_into(source, point)
        except (HomeImageError, OSError) as error:
            logger.error("home volume %s not carried into an image: %s", name, error)
            try:
                home_images.remove(self.homes_dir, name)
            except (HomeImageError, OSError) as cleanup:
                logger.error("home image of %s left behind: %s", name, cleanup)
            return volume
        labels = dict(volume.attrs.get("Labels") or {})
        volume.remove()  # its files are in the image now
        logger.info("home volume %s carried into the bounded image at %s", name, point)
        return self._bind(name, point, labels)

    def _bind(self, name: str, folder: Path, labels: dict[str, str]) -> Any:
        options = {"type": "none", "o": "bind", "device": str(folder)}
        return self.client.volumes.create(
            name=name, driver="local", driver_opts=options, labels=labels
        )

    def _volume_labels(self, user: str) -> dict[str, str]:
        return {**self._labels(), **({LABEL_USER: user} if user else {})}

    def _users(self, name: str, *, stopped: bool = False) -> bool:
        """Whether a container (a running one, or any with ``stopped``) uses the volume; True
        when the engine cannot tell."""
        try:
            # sparse: the listing alone tells (no inspection of each container found)
            listed = self.client.containers.list(all=stopped, filters={"volume": name}, sparse=True)
            return bool(listed)
        except DockerException as error:
            logger.error("home volume %s: cannot tell who uses it: %s", name, error)
            return True

    def _volume(self, name: str) -> Any:
        try:
            volume = self.client.volumes.get(name)
        except NotFound:
            return None
        # Never another portal's home (one engine, two installations): StartFailed.
        own = self._labels().get(LABEL_INSTALLATION, "")
        refuse_foreign_home(name, volume.attrs.get("Labels"), own)
        return volume

    # -- finding -------------------------------------------------------------------------

    def folder(self, name: str, *, create: bool) -> Path | None:
        """Where the home volume ``name`` keeps its files on this host (the Files page's home
        tasks): the volume's folder (:meth:`home_dir`; a bounded home's image mounted first);
        without a volume, the folder under the home root, if any. None when there is no home
        yet, unless ``create``: then it is made as a desktop's start would (:meth:`ensure`),
        its folder owned by the desktop user, mode 0700."""
        with self._lock_of(name):
            return self._folder(name, create)

    def _folder(self, name: str, create: bool) -> Path | None:
        volume = self._volume(name)
        if volume is not None:
            folder = self.home_dir(volume)
            if self.homes_dir is not None and folder == home_images.mount_point(
                self.homes_dir, name
            ):
                home_images.attach(self.homes_dir, name)
            return folder
        if self.home_root is not None:
            folder = self.shared_home(name)
            if folder.is_dir() or create:
                make_home_folder(folder)  # the volume itself comes with the first desktop
                return folder
            return None
        if not create:
            return None
        volume, created = self.ensure(name)
        folder = self.home_dir(volume)
        if created:
            os.chown(folder, DESKTOP_UID, DESKTOP_GID)
            os.chmod(folder, 0o700)
        return folder

    def space(self, name: str) -> HomeSpace | None:
        """What the bounded home ``name`` holds and can hold; None when it is not an image."""
        if self.homes_dir is None or self.home_root is not None:
            return None
        return home_images.space(home_images.mount_point(self.homes_dir, name))

    def shared_home(self, volume_name: str) -> Path:
        """The folder under the home root that holds the home volume ``volume_name``."""
        assert self.home_root is not None
        return self.home_root / home_folder_name(volume_name)

    def home_dir(self, volume: Any) -> Path:
        """Where a home volume's files are on this host: the bound folder of a bind volume
        (its ``Mountpoint`` is only mounted while a container uses it), else ``Mountpoint``."""
        options = volume.attrs.get("Options") or {}
        if options.get("o") == "bind" and options.get("device"):
            return Path(options["device"])
        return Path(volume.attrs.get("Mountpoint") or "")

    def _warn_unshared(self, volume: Any) -> None:
        wanted = self.shared_home(volume.name)
        if self.home_dir(volume) != wanted:
            self._warn_once(
                volume.name,
                f"is not a bind of {wanted} (made before DESKPOOL_HOME_ROOT was set): used as "
                "it is, its files stay on this node",
            )

    def _warn_once(self, name: str, why: str) -> None:
        if name not in self._warned:
            self._warned.add(name)
            logger.warning("home volume %s on node %s %s", name, self.node, why)


def _drop_lost_and_found(point: Path) -> None:
    """A new image's ``lost+found`` (empty; e2fsck makes it again when needed): a new home
    looks empty, so a warm claim seeds it with the image's skeleton."""
    with contextlib.suppress(OSError):
        (point / LOST_AND_FOUND).rmdir()


def make_home_folder(folder: Path) -> None:
    """Make a shared home folder (mode 0700, owned by the desktop user) unless it exists."""
    try:
        folder.mkdir(mode=0o700)
    except FileExistsError:
        if not folder.is_dir():
            raise StartFailed(f"home folder {folder} exists and is not a folder") from None
        return
    try:
        os.chmod(folder, 0o700)
        os.chown(folder, DESKTOP_UID, DESKTOP_GID)
    except OSError as error:
        if folder.stat().st_uid != DESKTOP_UID:
            raise StartFailed(
                f"cannot give home folder {folder} to uid {DESKTOP_UID}: {error} "
                "(an NFS export with root_squash: see docs/deploy.md)"
            ) from error
