"""The node's read-only copies of course folders (docs/course-files.md).

The desired state names, for each session, the course folders its desktop gets
(``DesiredSession.courses``: id, code, version). Before each reconcile step the agent makes
sure it holds a copy of every such folder at that version: it asks the portal for the
folder's manifest (:mod:`nodeagent.protocol_courses`), takes each file it does not hold yet
from the portal (a file of the same sha256 in the copy it had is linked, not fetched again),
checks its sha256, and builds the new version in a hidden folder that is renamed into place
when complete, then points ``current`` at it (an atomic symlink switch). So the bytes of a
file version cross the network once per node, whatever the number of its desktops.

Layout, under ``<sessions>/courses/``::

    <installation>-<course id>/
        v<version>/...       the folder's files (read-only, root's; mounted into desktops)
        v<version>.json      its manifest
        current -> v<version>

:mod:`nodeagent.runtime.course_mounts` mounts ``current`` (as resolved at the desktop's
start or claim) read-only at ``/courses/<code>``. Versions no desktop mounts any more are
removed after a newer one is in place.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Protocol

from docker.errors import DockerException

from nodeagent.portal_client import PortalError
from nodeagent.protocol import DesiredSession
from nodeagent.protocol_courses import CourseFolderRef, CourseManifest
from nodeagent.runtime.course_mounts import CURRENT, copy_dir, current_copy, version_of
from nodeagent.runtime.home_mounts import mount_count, release

logger = logging.getLogger(__name__)

RETRY_FIRST_S = 5.0  # a failed pull waits this long, doubled per failure, up to:
RETRY_MAX_S = 300.0


class CourseCopyError(RuntimeError):
    """A file the portal sent is not the one its manifest names (size or sha256)."""


class CourseSource(Protocol):
    """Where the folders come from: the portal's agent API (PortalClient)."""

    def course_manifest(self, course_id: int) -> CourseManifest: ...

    def course_file(self, course_id: int, sha256: str, out: Callable[[bytes], object]) -> None: ...


class CourseFolders:
    """Keeps this node's copies of the course folders its desktops need."""

    def __init__(
        self,
        source: CourseSource,
        root: Path,
        *,
        installation: Callable[[], str] = lambda: "",
        in_use: Callable[[], set[Path]] = set,
    ) -> None:
        self._source = source
        self.root = root
        self._installation = installation
        self._in_use = in_use  # version folders mounted into a desktop now
        # A failed pull is tried again after a delay, doubled per failure up to RETRY_MAX_S
        # (the loop steps every second): course id -> (version, when to try, the delay).
        self._retry: dict[int, tuple[int, float, float]] = {}

    def sync(self, sessions: Sequence[DesiredSession]) -> None:
        """Pull every folder the sessions name that is older here than asked; a failure is
        logged and tried again at the next step (the desktop starts with the copy there is)."""
        wanted: dict[int, CourseFolderRef] = {}
        for session in sessions:
            for ref in session.courses:
                if ref.id not in wanted or ref.version > wanted[ref.id].version:
                    wanted[ref.id] = ref
        for ref in wanted.values():
            have = current_copy(self.root, self._installation(), ref.id)
            if version_of(have) >= ref.version:
                continue
            version, not_before, delay = self._retry.get(ref.id, (0, 0.0, 0.0))
            if version == ref.version and time.monotonic() < not_before:
                continue
            try:
                self.pull(ref.id)
            except (PortalError, CourseCopyError, OSError) as error:
                delay = min(max(delay * 2, RETRY_FIRST_S), RETRY_MAX_S)
                self._retry[ref.id] = (ref.version, time.monotonic() + delay, delay)
                logger.warning(
                    "course %s (%s): not pulled (again in %.0f s): %s",
                    *(ref.id, ref.code, delay, error),
                )
            else:
                self._retry.pop(ref.id, None)

    def pull(self, course_id: int) -> Path:
        """Fetch the folder's manifest and the files not held yet; switch ``current``."""
        manifest = self._source.course_manifest(course_id)
        base = copy_dir(self.root, self._installation(), course_id)
        base.mkdir(parents=True, exist_ok=True, mode=0o755)
        target = base / f"v{manifest.version}"
        if target.is_dir():
            self._switch(base, target)
            return target
        held = self._held_files(base, course_id)
        building = base / f".v{manifest.version}.partial"
        shutil.rmtree(building, ignore_errors=True)
        building.mkdir(mode=0o755)
        fetched = 0
        for entry in manifest.files:
            path = building.joinpath(*entry.path.split("/"))
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
            old = held.get(entry.sha256)
            if old is not None and old.is_file():
                os.link(old, path)
                continue
            self._fetch(course_id, entry.sha256, entry.size, path)
            fetched += 1
        for folder, _dirs, _files in os.walk(building):
            os.chmod(folder, 0o555)
        (base / f"v{manifest.version}.json").write_text(manifest.model_dump_json())
        os.rename(building, target)
        self._switch(base, target)
        logger.info(
            "course %s (%s): version %s in place (%s files fetched, %s kept)",
            course_id,
            manifest.code,
            manifest.version,
            fetched,
            len(manifest.files) - fetched,
        )
        self.prune(base)
        return target

    def _fetch(self, course_id: int, sha256: str, size: int, path: Path) -> None:
        digest = hashlib.sha256()
        written = 0
        with open(path, "wb") as out:

            def take(chunk: bytes) -> None:
                nonlocal written
                digest.update(chunk)
                written += len(chunk)
                out.write(chunk)

            self._source.course_file(course_id, sha256, take)
        if written != size or digest.hexdigest() != sha256:
            path.unlink()
            raise CourseCopyError(
                f"file {sha256[:12]}… came as {written} bytes of another sha256 "
                f"(expected {size} bytes)"
            )
        os.chmod(path, 0o444)

    def _held_files(self, base: Path, course_id: int) -> dict[str, Path]:
        """sha256 -> a file of the current copy holding those bytes (to link, not fetch)."""
        current = current_copy(self.root, self._installation(), course_id)
        if current is None:
            return {}
        listed = base / f"{current.name}.json"
        try:
            manifest = CourseManifest.model_validate_json(listed.read_text())
        except (OSError, ValueError):
            return {}
        return {e.sha256: current.joinpath(*e.path.split("/")) for e in manifest.files}

    def _switch(self, base: Path, target: Path) -> None:
        link = base / CURRENT
        temporary = base / f".{CURRENT}.new"
        with contextlib.suppress(FileNotFoundError):
            temporary.unlink()
        temporary.symlink_to(target.name)
        os.replace(temporary, link)  # atomic: a reader sees the old or the new one

    def prune(self, base: Path) -> None:
        """Remove version folders that are not current and that no desktop mounts."""
        current = (base / CURRENT).resolve()
        try:
            used = {p.resolve() for p in self._in_use()}
        except (DockerException, OSError) as error:  # the engine not answering
            logger.warning("course copies in use not known (%s); older versions kept", error)
            return
        for folder in _versions(base.iterdir()):
            if folder.resolve() in (current, *used):
                continue
            _remove(folder)
            with contextlib.suppress(FileNotFoundError):
                (base / f"{folder.name}.json").unlink()


def _versions(paths: Iterable[Path]) -> list[Path]:
    return [p for p in paths if p.is_dir() and not p.is_symlink() and version_of(p) > 0]


def _remove(folder: Path) -> None:
    if mount_count(folder):  # sealed for a warm desktop (runtime.course_mounts.seal)
        release(folder)  # unmounts first; never deletes through a mount
        return
    for path, dirs, _files in os.walk(folder):
        for name in (path, *(os.path.join(path, d) for d in dirs)):
            os.chmod(name, 0o755)
    shutil.rmtree(folder, ignore_errors=True)
