"""The user's home in a warm desktop: a bind mount made after the container started.

Docker cannot add a volume to a running container, so a warm desktop (started for a class
booking before anyone asks) gets its home from a host folder, ``<sessions>/warm-homes/<key>``,
that the agent bind-mounts onto itself and marks *shared*; the container mounts it with
*rslave* propagation. When a student claims the desktop, the agent bind-mounts the student's
home volume (its ``Mountpoint`` on the host) onto that folder, and the mount propagates into
the running container: the desktop's ``/home/desktop`` becomes the student's home, the same
volume a cold start would mount. Needs root on the host, in dockerd's mount namespace (how
the agent runs on a GPU node); where it cannot, the warm start fails with that reason and
students get cold starts.

Removal never deletes through a mount: the folder is unmounted until nothing is mounted on
it, and only then deleted; if an unmount fails the folder is left alone and logged.
"""

from __future__ import annotations

import io
import logging
import os
import shutil
import subprocess
import tarfile
from pathlib import Path
from typing import Any

from nodeagent.protocol import DESKTOP_GID, DESKTOP_UID

logger = logging.getLogger(__name__)


class HomeMountError(Exception):
    """A mount or unmount the warm home needs failed (the message says which and why)."""


def mount_count(path: Path) -> int:
    """How many mounts sit on ``path`` (from /proc/self/mountinfo; bind mounts included)."""
    target = str(path)
    count = 0
    with open("/proc/self/mountinfo", encoding="utf-8") as f:
        for line in f:
            fields = line.split(" ")
            if len(fields) > 4 and _unescape(fields[4]) == target:
                count += 1
    return count


def _unescape(field: str) -> str:
    # mountinfo writes space, tab, newline and backslash as octal escapes.
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(code, char)
    return field


def run_mount(
    *args: str, needs: str = "a warm desktop's home", error: type[HomeMountError] = HomeMountError
) -> None:
    """``mount`` with ``args``; a failure raises ``error`` saying what ``needs`` it."""
    done = subprocess.run(["mount", *args], capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        detail = (done.stderr or done.stdout).strip()
        raise error(
            f"mount {' '.join(args)} failed: {detail or f'exit code {done.returncode}'} "
            f"({needs} needs the agent to run as root on the host)"
        )


def make_shared(folder: Path, **how: Any) -> None:
    """Make ``folder`` a shared mount point (a bind of itself first, unless mounted)."""
    if not mount_count(folder):
        run_mount("--bind", str(folder), str(folder), **how)
    run_mount("--make-shared", str(folder), **how)


def prepare(folder: Path, skel_tar: bytes) -> None:
    """Make ``folder`` a shared mount point holding the image's skeleton home (uid 1000)."""
    folder.mkdir(parents=True, exist_ok=True, mode=0o755)
    seed(folder, skel_tar)
    make_shared(folder)


def attach(volume_dir: Path, folder: Path) -> None:
    """Mount the student's home volume (its folder on the host) on the shared ``folder``."""
    if not volume_dir.is_dir():
        raise HomeMountError(
            f"home volume folder {volume_dir} is not visible to the agent (it must run in "
            "dockerd's mount namespace)"
        )
    run_mount("--bind", str(volume_dir), str(folder))


def release(folder: Path) -> None:
    """Unmount everything on ``folder``, then delete it; never delete through a mount."""
    if not folder.exists():
        return
    for _ in range(8):
        if not mount_count(folder):
            break
        done = subprocess.run(["umount", str(folder)], capture_output=True, text=True, timeout=30)
        if done.returncode != 0:
            logger.error("could not unmount %s: %s", folder, done.stderr.strip())
            return
    if mount_count(folder):
        logger.error("%s is still mounted; left in place", folder)
        return
    shutil.rmtree(folder, ignore_errors=True)


def seed(folder: Path, skel_tar: bytes) -> None:
    """Unpack the image's ``/etc/skel`` (a ``get_archive`` tar) into ``folder``, owned by the
    desktop user, as Docker does for a new home volume; files already there are kept."""
    with tarfile.open(fileobj=io.BytesIO(skel_tar)) as tar:
        for member in tar.getmembers():
            parts = Path(member.name).parts[1:]  # drop the leading "skel"
            if not parts or ".." in parts or not (member.isfile() or member.isdir()):
                continue
            target = folder.joinpath(*parts)
            if member.isdir():
                target.mkdir(parents=True, exist_ok=True)
            elif not target.exists():
                target.parent.mkdir(parents=True, exist_ok=True)
                source = tar.extractfile(member)
                if source is not None:
                    target.write_bytes(source.read())
                    os.chmod(target, member.mode & 0o777)
    for root, dirs, files in os.walk(folder):
        for name in (root, *(os.path.join(root, n) for n in dirs + files)):
            os.chown(name, DESKTOP_UID, DESKTOP_GID)
