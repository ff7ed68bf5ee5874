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

The binds, the shared marks and the unmounts are the kernel's calls (``mount(2)``,
``umount2(2)``), not the ``mount`` program: a booked class claims dozens of warm desktops at
once, and each program started cost the node about 2 ms of CPU (docs/measurements.md, "Warm
claims without a process a login"). A read-only remount is still the program's
(:func:`run_mount`): it keeps the mount's other flags.
"""

from __future__ import annotations

import ctypes
import errno
import io
import logging
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

from nodeagent.protocol import DESKTOP_GID, DESKTOP_UID

logger = logging.getLogger(__name__)

_LIBC = ctypes.CDLL(None, use_errno=True)
MS_BIND = 0x1000  # <sys/mount.h>
MS_SHARED = 1 << 20


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


HOME_NEEDS = "a warm desktop's home"


def _failed(what: str, detail: str, needs: str, error: type[HomeMountError]) -> HomeMountError:
    return error(f"{what} failed: {detail} ({needs} needs the agent to run as root on the host)")


def run_mount(
    *args: str, needs: str = HOME_NEEDS, error: type[HomeMountError] = HomeMountError
) -> None:
    """The ``mount`` program with ``args`` (what the calls below do not cover: a read-only
    remount keeps the mount's other flags); a failure raises ``error`` saying what ``needs``
    it."""
    done = subprocess.run(["mount", *args], capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        detail = (done.stderr or done.stdout).strip()
        raise _failed(
            f"mount {' '.join(args)}", detail or f"exit code {done.returncode}", needs, error
        )


def _mount_call(
    source: Path | None,
    target: Path,
    flags: int,
    what: str,
    needs: str,
    error: type[HomeMountError],
) -> None:
    """``mount(2)`` without a file system type or data (a bind, a propagation change)."""
    given = None if source is None else os.fsencode(source)
    if _LIBC.mount(given, os.fsencode(target), None, ctypes.c_ulong(flags), None) != 0:
        raise _failed(what, os.strerror(ctypes.get_errno()), needs, error)


def bind(
    source: Path,
    target: Path,
    *,
    needs: str = HOME_NEEDS,
    error: type[HomeMountError] = HomeMountError,
) -> None:
    """Bind-mount the folder ``source`` on ``target`` (``mount --bind``)."""
    _mount_call(source, target, MS_BIND, f"mount --bind {source} {target}", needs, error)


def make_shared(
    folder: Path, *, needs: str = HOME_NEEDS, error: type[HomeMountError] = HomeMountError
) -> None:
    """Make ``folder`` a shared mount point (a bind of itself first, unless mounted)."""
    if not mount_count(folder):
        bind(folder, folder, needs=needs, error=error)
    _mount_call(None, folder, MS_SHARED, f"mount --make-shared {folder}", needs, error)


def unmount(folder: Path) -> str:
    """``umount2(2)`` of the top mount on ``folder``: "" when done, else why not."""
    if _LIBC.umount2(os.fsencode(folder), 0) == 0:
        return ""
    code = ctypes.get_errno()
    return f"{errno.errorcode.get(code, code)}: {os.strerror(code)}"


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
    bind(volume_dir, folder)


def release(folder: Path) -> None:
    """Unmount everything on ``folder``, then delete it; never delete through a mount."""
    if not folder.exists():
        return
    for _ in range(8):
        if not mount_count(folder):
            break
        why = unmount(folder)
        if why:
            logger.error("could not unmount %s: %s", folder, why)
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
