"""Homes the disk bounds: one loop-mounted ext4 image per node-local home (issue 36).

A home of a node that keeps homes to itself is ``<homes dir>/<volume>.img``: a sparse file,
formatted ext4 (no reserved blocks, its root owned by the desktop user) and a little larger
than the person's quota so that its files may take the quota (ext4's journal and inode
tables come on top: about 2 % of a 10 GB home, 15 % of a 64 MB one), loop-mounted
(``nodev,nosuid,discard``) on ``<homes dir>/<volume>/``. The Docker volume of that name is
a bind of the mount, so whatever writes into the home (the
desktop, the Files page, a program) meets the filesystem's end: "No space left on device",
counted in real blocks (a sparse file's holes cost nothing; its written blocks do). Only
what the home holds takes room on the node's disk (a sparse image; ``discard`` gives back
the blocks of deleted files), never more than the quota.

Why a loop image rather than the alternatives (docs/security.md): project quotas need the
node's filesystem mounted with ``prjquota`` (stock Debian's ext4 root is not), Docker's
``--storage-opt size`` needs overlay2 on xfs with ``pquota``, and a tmpfs volume would be
RAM. A loop device needs only root and the kernel's loop driver, which stock Debian has.

The mount point itself (when nothing is mounted on it) is root's, mode 0000: a desktop whose
home image is not mounted cannot write into the node's disk through it. A larger quota grows
the image while mounted (``truncate``, ``losetup -c``, ``resize2fs``); a smaller one never
shrinks it (what was written is kept; the Files page's own check holds the person to the
smaller quota). Images stay mounted while the agent runs; at its start
:func:`mount_all` mounts those a reboot unmounted.
"""

from __future__ import annotations

import logging
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from nodeagent.home_files import HOME_FULL_AT
from nodeagent.protocol import DESKTOP_GID, DESKTOP_UID
from nodeagent.runtime import home_mounts
from nodeagent.runtime.base import StartFailed, home_folder_name

logger = logging.getLogger(__name__)

IMAGE_SUFFIX = ".img"
MB = 1024 * 1024
MOUNT_OPTIONS = "loop,nodev,nosuid,discard"
_COMMAND_TIMEOUT_S = 600  # a carry-over copy of a large home takes a while
_GROW_TRIES = 4
# The image size that gave each quota its room (ext4's own blocks on top), learned from the
# first home made for it: later homes of that quota are made at that size at once, not
# made smaller and grown (at a class's first start, forty new homes of one quota).
_sizes: dict[int, int] = {}
_SIZES_KEPT = 64
PROBE_PREFIX = ".probe-"  # learn_size's throwaway home


class HomeImageError(StartFailed):
    """A home image could not be made, mounted, grown or filled (the message says why)."""


@dataclass(frozen=True)
class HomeSpace:
    """What a mounted home image holds and can hold, in bytes (its filesystem's blocks)."""

    used_bytes: int
    size_bytes: int  # what its files may take (ext4's own blocks and reserve left out)
    available_bytes: int

    @property
    def full(self) -> bool:
        return self.available_bytes <= self.size_bytes * (1 - HOME_FULL_AT)


def image_path(homes_dir: Path, volume: str) -> Path:
    return homes_dir / f"{home_folder_name(volume)}{IMAGE_SUFFIX}"


def mount_point(homes_dir: Path, volume: str) -> Path:
    return homes_dir / home_folder_name(volume)


def _run(*command: str) -> str:
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=_COMMAND_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        raise HomeImageError(f"{command[0]} failed: {error}") from error
    if done.returncode != 0:
        detail = (done.stderr or done.stdout).strip() or f"exit code {done.returncode}"
        raise HomeImageError(f"{' '.join(command)} failed: {detail}")
    return done.stdout


def loop_device(point: Path) -> str | None:
    """The device mounted on ``point`` (``/dev/loopN``); None when nothing is."""
    if not is_mounted(point):
        return None
    lines = _run("findmnt", "-n", "-o", "SOURCE", "--mountpoint", str(point)).split()
    return lines[-1] if lines else None


def is_mounted(point: Path) -> bool:
    return home_mounts.mount_count(point) > 0


def create(homes_dir: Path, volume: str, size_mb: int, *, idle: bool = True) -> Path:
    """Make, format and mount the image of ``volume`` (its files may take ``size_mb``); its
    mount point. An image that exists already is only mounted (and grown: :func:`attach`)."""
    image = image_path(homes_dir, volume)
    if image.exists():
        return attach(homes_dir, volume, size_mb, idle=idle)
    prepare_dir(homes_dir)
    partial = image.with_name(f".{image.name}.new")
    try:
        with open(partial, "wb") as f:
            f.truncate(_sizes.get(size_mb, size_mb * MB))
        _run(
            "mkfs.ext4", "-q", "-F", "-m", "0", "-L", "deskpool-home",
            # Lazy: the journal and inode tables of a sparse file read as zeros already, so
            # a new 10 GB home takes about 4 MB of the node's disk, not 70.
            "-E", f"root_owner={DESKTOP_UID}:{DESKTOP_GID},"
            "lazy_itable_init=1,lazy_journal_init=1",
            str(partial),
        )  # fmt: skip
        partial.rename(image)
    except (OSError, HomeImageError) as error:
        partial.unlink(missing_ok=True)
        raise HomeImageError(f"cannot make the home image {image}: {error}") from error
    logger.info("home %s: made the image %s for %d MB", volume, image, size_mb)
    point = attach(homes_dir, volume, size_mb, idle=idle)
    os.chmod(point, 0o700)  # the mounted filesystem's root: the desktop user's alone
    if size_mb and _total_bytes(point) >= size_mb * MB:
        if len(_sizes) >= _SIZES_KEPT:
            _sizes.clear()
        _sizes[size_mb] = image.stat().st_size
    return point


def learn_size(homes_dir: Path, size_mb: int) -> int | None:
    """Make one throwaway home image of ``size_mb`` (grown until its files may take it) and
    remove it, so that the homes of that quota are made at their size at once: at a class's
    first start, each first-time student's claim then makes its home without a
    ``resize2fs``. The agent does this for the node's quota when it starts; the image size
    learned (bytes), or None when it could not (logged: the first real home says why)."""
    if size_mb <= 0:
        return None
    if size_mb in _sizes:
        return _sizes[size_mb]
    volume = f"{PROBE_PREFIX}{size_mb}"  # a dot first: mount_all never mounts it
    try:
        create(homes_dir, volume, size_mb)
    except (HomeImageError, OSError) as error:
        logger.warning("could not learn the image size of a %d MB home: %s", size_mb, error)
    finally:
        try:
            remove(homes_dir, volume)
        except (HomeImageError, OSError) as error:
            logger.warning("could not remove the probe home %s: %s", volume, error)
    return _sizes.get(size_mb)


def attach(homes_dir: Path, volume: str, size_mb: int = 0, *, idle: bool = True) -> Path:
    """Mount ``volume``'s image unless it is, and grow it to ``size_mb`` (0: as it is).
    ``idle``: no desktop uses the home, so it may be unmounted to grow (where the kernel
    refuses to grow it mounted)."""
    image = image_path(homes_dir, volume)
    point = mount_point(homes_dir, volume)
    if not is_mounted(point):
        _mount(image, point)
    if size_mb:
        grow(image, point, size_mb, idle=idle)
    return point


def _mount(image: Path, point: Path) -> None:
    _guard(point)
    _run("mount", "-t", "ext4", "-o", MOUNT_OPTIONS, str(image), str(point))


def _guard(point: Path) -> None:
    """Make the (unmounted) mount point a folder nobody but root may write into."""
    point.mkdir(mode=0o000, exist_ok=True)
    os.chown(point, 0, 0)
    os.chmod(point, 0o000)


def grow(image: Path, point: Path, size_mb: int, *, idle: bool = True) -> None:
    """Grow the mounted image until its filesystem holds ``size_mb`` (ext4's own blocks, its
    journal and inode tables, come on top, so the quota is what the files may take). A
    smaller quota is logged and left: shrinking could lose what was written.

    Mounted (``resize2fs`` online: the agent needs CAP_SYS_RESOURCE, which root has on a
    node); where the kernel refuses and the home is ``idle`` and mounted only here, it is
    unmounted, checked, grown and mounted again. Otherwise it grows at its next start."""
    wanted = size_mb * MB
    total = _total_bytes(point)
    if total >= wanted:
        if total > wanted + max(wanted // 20, 8 * MB):
            logger.info(
                "home image %s holds %d MB, its quota is %d MB: not shrunk (nothing written "
                "is lost; the Files page holds the person to the quota)",
                image,
                total // MB,
                size_mb,
            )
        return
    before = image.stat().st_size
    for _ in range(_GROW_TRIES):
        # The missing room, and the inode tables and such that come with it.
        size = image.stat().st_size + (wanted - total) * 21 // 20 + MB
        if not _resize(image, point, size, idle=idle):
            return
        total = _total_bytes(point)
        if total >= wanted:
            break
    logger.info(
        "home image %s grown from %d MB to %d MB (%d MB for files)",
        image,
        before // MB,
        image.stat().st_size // MB,
        total // MB,
    )


def _resize(image: Path, point: Path, size: int, *, idle: bool) -> bool:
    """Grow the image file to ``size`` and its filesystem with it; False when it cannot now
    (in use where the kernel refuses to grow it mounted: logged)."""
    device = loop_device(point)
    if device is None:
        raise HomeImageError(f"cannot grow {image}: it is not mounted on {point}")
    with open(image, "r+b") as f:
        f.truncate(size)
    _run("losetup", "-c", device)
    try:
        _run("resize2fs", device)
        return True
    except HomeImageError as online:
        if not idle or _mounts_of(device) != 1:
            logger.warning("cannot grow %s while it is in use (%s): it grows later", image, online)
            return False
    _run("umount", str(point))
    try:
        _check(image)
        _run("resize2fs", str(image))
    finally:
        _mount(image, point)
    return True


def _mounts_of(device: str) -> int:
    """How many mounts of this mount namespace show ``device`` (a warm desktop's bind of a
    home is one more)."""
    with open("/proc/self/mountinfo", encoding="utf-8") as f:
        return sum(1 for line in f if f" - ext4 {device} " in line)


def _check(image: Path) -> None:
    """``e2fsck -f -p``: resize2fs wants a freshly checked filesystem; 0 and 1 (fixed) pass."""
    try:
        done = subprocess.run(
            ["e2fsck", "-f", "-p", str(image)],
            capture_output=True,
            text=True,
            timeout=_COMMAND_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        raise HomeImageError(f"e2fsck failed: {error}") from error
    if done.returncode > 1:
        detail = (done.stderr or done.stdout).strip()
        raise HomeImageError(f"e2fsck -f -p {image} failed ({done.returncode}): {detail}")


def _total_bytes(point: Path) -> int:
    """What the files on the filesystem mounted on ``point`` may take: its blocks, less ext4's
    own and the few it keeps back for its allocator (statvfs: ``f_bavail`` leaves them out)."""
    stats = os.statvfs(point)
    return (stats.f_blocks - stats.f_bfree + stats.f_bavail) * stats.f_frsize


def carry_into(source: Path, point: Path) -> None:
    """Copy a plain volume's files (owners, modes, times, links kept) into the mounted image."""
    _run("cp", "-a", "--", f"{source}/.", f"{point}/")


def space(point: Path) -> HomeSpace | None:
    """What the mounted home at ``point`` holds (statvfs: cheap); None when not mounted."""
    if not is_mounted(point):
        return None
    stats = os.statvfs(point)
    available = stats.f_bavail * stats.f_frsize
    size = (stats.f_blocks - stats.f_bfree) * stats.f_frsize + available
    return HomeSpace(used_bytes=size - available, size_bytes=size, available_bytes=available)


def size_for(source: Path, quota_mb: int) -> int:
    """What the image's files must be able to take (MB) to hold ``source``'s whole: the quota,
    or what they take and a little more (a home over its quota is carried in full, with
    little room left; the Files page refuses uploads until files are deleted)."""
    used = 0
    for root, dirs, files in os.walk(source):
        for name in (*dirs, *files):
            try:
                used += os.lstat(os.path.join(root, name)).st_blocks * 512
            except OSError:
                continue
    # Folders' and extent trees' blocks on top (ext4's journal and inode tables are not
    # counted: grow() fits what the files may take).
    return max(quota_mb, int(used * 1.02) // MB + 4)


def prepare_dir(homes_dir: Path) -> None:
    homes_dir.mkdir(parents=True, exist_ok=True, mode=0o711)


def mount_all(homes_dir: Path) -> list[str]:
    """Mount every image of ``homes_dir`` that is not (the agent's start, after a reboot);
    the volumes mounted. One that fails is logged and left."""
    if not homes_dir.is_dir():
        return []
    mounted = []
    for image in sorted(homes_dir.glob(f"*{IMAGE_SUFFIX}")):
        volume = image.name[: -len(IMAGE_SUFFIX)]
        if not volume or volume.startswith("."):
            continue
        if is_mounted(mount_point(homes_dir, volume)):
            continue
        try:
            attach(homes_dir, volume)
        except (HomeImageError, OSError) as error:
            logger.error("cannot mount home image %s: %s", image, error)
            continue
        mounted.append(volume)
    return mounted


def release_all(folder: Path) -> None:
    """Unmount every home image's mount point found under ``folder`` (any depth: a test's or
    a demo's state folder), keeping the images; one that fails is logged."""
    if not folder.is_dir():
        return
    for image in sorted(folder.rglob(f"*{IMAGE_SUFFIX}")):
        point = image.with_name(image.name[: -len(IMAGE_SUFFIX)])
        while is_mounted(point):
            try:
                _run("umount", str(point))
            except HomeImageError as error:
                logger.error("%s", error)
                break


def remove(homes_dir: Path, volume: str) -> None:
    """Unmount ``volume``'s image and delete it and its mount point (tests; a home the node
    no longer keeps). Never deletes through a mount."""
    point = mount_point(homes_dir, volume)
    while point.exists() and is_mounted(point):
        _run("umount", str(point))
    if point.exists():
        point.rmdir()
    image_path(homes_dir, volume).unlink(missing_ok=True)
