"""Course folders in desktops (docs/course-files.md): read-only at ``/courses/<code>``.

A cold start bind-mounts each folder's node copy (:mod:`nodeagent.course_files`, the version
``current`` points at then) read-only into the new container (:func:`course_volumes`).

A warm desktop was started before anyone claimed it, and Docker cannot add a mount to a
running container. So, as for its home (:mod:`~nodeagent.runtime.home_mounts`), it gets
``/courses`` from a host folder, ``<sessions>/warm-courses/<key>``, that the agent
bind-mounts onto itself and marks *shared*; the container mounts it read-only with *rslave*
propagation (:func:`prepare_warm`). At the claim the agent makes ``<key>/<code>`` and
bind-mounts the folder's copy there (:func:`attach_warm`), the copy first made a read-only
mount of itself (:func:`seal`: a remount to read-only after the bind would not reach the
running desktop's propagated copy): it shows up in the running desktop at
``/courses/<code>``, as read-only as a cold start's. Needs root on the host, in dockerd's
mount namespace, as the warm home does.

A folder without a node copy yet (the portal unreachable) is left out and logged: the
desktop starts without it rather than not at all. Removal unmounts first and never deletes
through a mount (:func:`release_warm`).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import docker
from docker.types import Mount

from nodeagent.protocol_courses import COURSES_MOUNT, CourseFolderRef
from nodeagent.runtime.home_mounts import (
    HomeMountError,
    bind,
    make_shared,
    mount_count,
    release,
    run_mount,
)

logger = logging.getLogger(__name__)

COURSES_DIR_NAME = "courses"  # under the sessions folder: the node's copies
WARM_COURSES_DIR_NAME = "warm-courses"  # under the sessions folder: warm desktops' /courses


CURRENT = "current"  # in a course's copy folder: the version in force


def copy_dir(root: Path, installation: str, course_id: int) -> Path:
    return root / (f"{installation}-{course_id}" if installation else f"-{course_id}")


def current_copy(root: Path, installation: str, course_id: int) -> Path | None:
    """The version folder ``current`` points at (resolved), or None when there is none yet."""
    link = copy_dir(root, installation, course_id) / CURRENT
    target = link.resolve() if link.is_symlink() else None
    return target if target is not None and target.is_dir() else None


def version_of(path: Path | None) -> int:
    if path is None or not path.name.startswith("v"):
        return 0
    with contextlib.suppress(ValueError):
        return int(path.name[1:])
    return 0


class CourseMountError(HomeMountError):
    """A mount a warm desktop's course folders need failed (the message says which, why)."""


def courses_root(sessions_dir: Path) -> Path:
    return sessions_dir / COURSES_DIR_NAME


def _copies(
    sessions_dir: Path, installation: str, refs: Iterable[CourseFolderRef]
) -> list[tuple[CourseFolderRef, Path]]:
    found = []
    for ref in refs:
        copy = current_copy(courses_root(sessions_dir), installation, ref.id)
        if copy is None:
            logger.warning("course folder %s (%s) has no copy on this node yet", ref.id, ref.code)
            continue
        found.append((ref, copy))
    return found


def course_volumes(
    sessions_dir: Path, installation: str, refs: Sequence[CourseFolderRef]
) -> dict[str, dict[str, Any]]:
    """docker-py ``volumes`` entries mounting each folder's copy read-only."""
    return {
        str(copy): {"bind": f"{COURSES_MOUNT}/{ref.code}", "mode": "ro"}
        for ref, copy in _copies(sessions_dir, installation, refs)
    }


def warm_folder(sessions_dir: Path, key: str) -> Path:
    return sessions_dir / WARM_COURSES_DIR_NAME / key


COURSE_NEEDS = "a warm desktop's course folders"


def _bind(source: Path, target: Path) -> None:
    bind(source, target, needs=COURSE_NEEDS, error=CourseMountError)


def prepare_warm(sessions_dir: Path, key: str) -> Path:
    """Make the warm desktop's ``/courses`` folder a shared mount point (empty for now)."""
    folder = warm_folder(sessions_dir, key)
    folder.mkdir(parents=True, exist_ok=True, mode=0o755)
    make_shared(folder, needs=COURSE_NEEDS, error=CourseMountError)
    return folder


def warm_mount(sessions_dir: Path, key: str) -> Mount:
    """The warm desktop's ``/courses``: its shared host folder, read-only, rslave."""
    folder = prepare_warm(sessions_dir, key)
    return Mount(COURSES_MOUNT, str(folder), type="bind", read_only=True, propagation="rslave")


def attach_warm(
    sessions_dir: Path, installation: str, key: str, refs: Sequence[CourseFolderRef]
) -> None:
    """At the claim: bind each of the session's course folders read-only into the warm
    desktop's shared ``/courses`` (it propagates into the running container)."""
    folder = warm_folder(sessions_dir, key)
    for ref, copy in _copies(sessions_dir, installation, refs):
        target = folder / ref.code
        target.mkdir(exist_ok=True, mode=0o755)
        if mount_count(target):
            continue  # a claim tried again
        with open(_record(sessions_dir, key), "a", encoding="utf-8") as record:
            record.write(f"{copy}\n")  # before the mount: pruning never takes it away
        seal(copy)
        _bind(copy, target)  # a copy of a read-only mount: read-only


def seal(copy: Path) -> None:
    """Make the node's copy a read-only mount of itself. A remount's read-only flag stays on
    the mount it is made on and never reaches the copies propagated into running desktops;
    a bind of a read-only mount is read-only from the start, and so are its propagated
    copies. Done once per version folder; pruning unmounts it before deleting."""
    if not mount_count(copy):
        _bind(copy, copy)
        # The program: it keeps the mount's other flags (nosuid, nodev, ...), which a bare
        # remount call would clear.
        run_mount("-o", "remount,bind,ro", str(copy), needs=COURSE_NEEDS, error=CourseMountError)


def release_warm(sessions_dir: Path, key: str) -> None:
    """Unmount the warm desktop's course folders and its ``/courses``, then delete them."""
    folder = warm_folder(sessions_dir, key)
    if folder.is_dir():
        for child in folder.iterdir():
            release(child)
        release(folder)
    if not folder.exists():
        _record(sessions_dir, key).unlink(missing_ok=True)


def release_orphans(sessions_dir: Path, keys: set[str], older_than_s: float) -> None:
    """Release the ``/courses`` folders of warm desktops whose container is gone (removed by
    hand, or a crash between the two); one younger than ``older_than_s`` may belong to a start
    in progress and is left alone."""
    warm = sessions_dir / WARM_COURSES_DIR_NAME
    if not warm.is_dir():
        return
    for folder in warm.iterdir():
        if folder.name in keys or not folder.is_dir():
            continue
        with contextlib.suppress(FileNotFoundError):
            if time.time() - folder.stat().st_mtime > older_than_s:
                logger.warning("releasing the course folders of gone warm desktop %s", folder.name)
                release_warm(sessions_dir, folder.name)


def _record(sessions_dir: Path, key: str) -> Path:
    return sessions_dir / WARM_COURSES_DIR_NAME / f"{key}.sources"


def warm_sources(sessions_dir: Path) -> set[Path]:
    """Course copies mounted into warm desktops now (kept when older versions are pruned)."""
    warm = sessions_dir / WARM_COURSES_DIR_NAME
    if not warm.is_dir():
        return set()
    return {
        Path(line)
        for record in warm.glob("*.sources")
        for line in record.read_text().splitlines()
        if line
    }


def mounted_sources(
    client: docker.DockerClient, sessions_dir: Path, labels: list[str]
) -> set[Path]:
    """Course copies mounted into this node's desktops now: the sources of their
    ``/courses/...`` binds (cold starts) and of the warm desktops' claims."""
    found = warm_sources(sessions_dir)
    # sparse: the listing's summaries carry the mounts (no inspection of each container)
    for container in client.containers.list(all=True, filters={"label": labels}, sparse=True):
        for mount in container.attrs.get("Mounts") or []:
            if str(mount.get("Destination", "")).startswith(f"{COURSES_MOUNT}/"):
                found.add(Path(mount.get("Source", "")))
    return found
