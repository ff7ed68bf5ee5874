"""Safe file operations in ONE home folder, for the Files page's home tasks (list, delete:
:mod:`nodeagent.protocol_files`) and the gateway's transfers (:meth:`HomeFolder.open_file`,
:meth:`HomeFolder.begin_upload`: :mod:`nodeagent.gateway.files`). No Docker, no portal.

The agent runs as root, and what is inside a home was written by the person's desktop (uid
1000), which can make links to anywhere, and swap a folder for a link at any moment. So
nothing here opens a path as a whole: the home is opened with ``O_DIRECTORY|O_NOFOLLOW``,
then each name below it relative to its folder's descriptor (``dir_fd``) with
``O_NOFOLLOW``. A link is listed as a link and never followed, anywhere in a path; nothing
outside the home is read, written or deleted. The folder holding the home (a Docker
volume's ``_data``, or ``<DESKPOOL_HOME_ROOT>/<volume>``) is the agent's and trusted.

Every expected problem (a missing file, a link, a full home) is :class:`HomeFileError`,
whose message is an English sentence the Files page shows as it is.

What a home holds (:meth:`HomeFolder.used_bytes`, against the quota): the sum of its regular
files' sizes (``st_size``, what the person sees in a listing), but a sparse file's only as
far as it has real blocks (an 11 GB file of holes takes no room, and the disk that bounds a
home counts blocks: nodeagent/runtime/home_images.py), found without following links;
folders, links and hard links' extra names are not counted more than their files.

A write the disk refuses (a home image full: ENOSPC, or a file server's quota: EDQUOT) is
:data:`HOME_FULL`, the sentence the Files page shows for a full home.
"""

from __future__ import annotations

import errno
import os
import secrets
import shutil
import stat
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO, NamedTuple

from nodeagent.protocol import DESKTOP_GID, DESKTOP_UID
from nodeagent.protocol_files import HOME_LIST_MAX, HomeEntry, HomeEntryKind, home_path

MB = 1024 * 1024  # what the portal's *_MB settings count in
_FOLDER_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: opening a FIFO the desktop planted must not hang the agent (it is refused).
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_NEW_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
TEMP_PREFIX = ".deskpool-upload-"
# The portal's own files in a home: the folder its desktops write to (``~/.deskpool``: the
# images' save.d/50-stopped-at) and an upload's temporary file (TEMP_PREFIX). Never deleted
# through the Files page (the portal refuses first: scheduling.services.home_files).
PORTAL_FOLDER = ".deskpool"
_SHOWN_MAX = 80  # characters of a path a sentence shows (reasons are cut at 300)
_CHUNK = 1024 * 1024


HOME_FULL = "Your home folder is full: delete files before you upload more."
# A home this full of its quota counts as full (the Files page, the desktop page, the agent's
# measure of a home image): the disk refuses writes a little before the last byte.
HOME_FULL_AT = 0.98


def portal_own(path: str) -> bool:
    """Whether ``path`` (a ``home_path``) is the portal's own: ``.deskpool`` or anything under
    it, or an upload's temporary file."""
    parts = path.split("/") if path else []
    return bool(parts) and (parts[0] == PORTAL_FOLDER or parts[-1].startswith(TEMP_PREFIX))


class HomeFileError(Exception):
    """An operation refused or failed; the message is a sentence for the person."""


class HomeFull(HomeFileError):
    """An upload the home's quota has no room for."""


class Listing(NamedTuple):
    entries: list[HomeEntry]  # folders first, then by name; at most HOME_LIST_MAX
    truncated: bool  # the folder holds more
    skipped: int  # names that are not valid UTF-8, left out


def megabytes(size: int) -> str:
    """``size`` bytes in MB as a sentence shows it: one decimal below 100 MB, and at least
    0.1 for anything but nothing."""
    value = max(size / MB, 0.1) if size else 0.0
    return f"{value:.1f}" if value < 100 else f"{value:.0f}"


def shown(path: str) -> str:
    """A path as a sentence shows it, quoted; a long one keeps its end."""
    if len(path) > _SHOWN_MAX:
        path = "…" + path[-(_SHOWN_MAX - 1) :]
    return f'"{path}"'


def _parts(path: str) -> list[str]:
    try:
        home_path(path)
    except ValueError as error:
        raise HomeFileError(f"{shown(path)} is not a valid path in your home: {error}.") from None
    return path.split("/") if path else []


def _kind(mode: int) -> HomeEntryKind:
    if stat.S_ISDIR(mode):
        return "folder"
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISLNK(mode):
        return "link"
    return "other"


def _utf8(name: str) -> bool:
    try:
        name.encode("utf-8")  # a name that is not UTF-8 holds surrogate escapes
    except UnicodeEncodeError:
        return False
    return True


class HomeFolder:
    """One home folder, open for the life of a ``with`` block (:meth:`open`)."""

    def __init__(self, fd: int, root: Path) -> None:
        self._fd = fd
        self.root = root

    @classmethod
    @contextmanager
    def open(cls, root: Path) -> Iterator[HomeFolder]:
        """The home at ``root`` (the agent's path; its last name must not be a link)."""
        try:
            fd = os.open(root, _FOLDER_FLAGS)
        except FileNotFoundError:
            raise HomeFileError("Your home folder does not exist on this node.") from None
        except OSError as error:
            raise HomeFileError(
                f"Your home folder cannot be opened on this node: {error.strerror}."
            ) from None
        try:
            yield cls(fd, root)
        finally:
            os.close(fd)

    # -- walking -------------------------------------------------------------------------

    def _folder(self, parts: list[str]) -> int:
        """A new descriptor of the folder ``parts`` names (the home for none); every name
        opened relative to the one before, links refused."""
        fd = os.dup(self._fd)
        for depth, name in enumerate(parts):
            try:
                inner = os.open(name, _FOLDER_FLAGS, dir_fd=fd)
            except OSError as error:
                problem = _not_a_folder(fd, name, "/".join(parts[: depth + 1]), error)
                os.close(fd)
                raise problem from None
            os.close(fd)
            fd = inner
        return fd

    @contextmanager
    def _parent(self, path: str) -> Iterator[tuple[int, str]]:
        """The open folder holding ``path``'s last name, and that name."""
        parts = _parts(path)
        if not parts:
            raise HomeFileError("Choose a file or folder in your home, not the home itself.")
        fd = self._folder(parts[:-1])
        try:
            yield fd, parts[-1]
        finally:
            os.close(fd)

    # -- the operations ------------------------------------------------------------------

    def list(self, path: str = "") -> Listing:
        """The folder's entries (links listed as links, never followed)."""
        fd = self._folder(_parts(path))
        found: list[tuple[bool, str, HomeEntryKind, int, float]] = []
        skipped = 0
        try:
            with os.scandir(fd) as names:
                for entry in names:
                    if not _utf8(entry.name):
                        skipped += 1
                        continue
                    try:
                        info = entry.stat(follow_symlinks=False)
                    except FileNotFoundError:
                        continue  # deleted meanwhile
                    kind = _kind(info.st_mode)
                    size = info.st_size if kind == "file" else 0
                    found.append((kind != "folder", entry.name, kind, size, info.st_mtime))
        finally:
            os.close(fd)
        found.sort(key=lambda row: row[:2])  # folders first, then by name
        entries = [
            HomeEntry(
                name=name, kind=kind, size=size, modified=datetime.fromtimestamp(mtime, tz=UTC)
            )
            for _, name, kind, size, mtime in found[:HOME_LIST_MAX]
        ]
        return Listing(entries, len(found) > HOME_LIST_MAX, skipped)

    def open_file(self, path: str) -> tuple[BinaryIO, int]:
        """A regular file open for reading (the caller closes it), and its size then."""
        with self._parent(path) as (parent, name):
            before = _lstat(parent, name, path)
            _require_file(before.st_mode, path, "downloaded")
            try:
                fd = os.open(name, _FILE_FLAGS, dir_fd=parent)
            except OSError as error:
                raise HomeFileError(f"Cannot open {shown(path)}: {error.strerror}.") from None
        file = os.fdopen(fd, "rb")
        try:
            now = os.fstat(file.fileno())
            if (now.st_dev, now.st_ino) != (before.st_dev, before.st_ino):
                raise HomeFileError(f"{shown(path)} changed while it was opened; try again.")
            _require_file(now.st_mode, path, "downloaded")
            os.set_blocking(file.fileno(), True)
        except BaseException:
            file.close()
            raise
        return file, now.st_size

    def begin_upload(self, path: str, size: int, quota_bytes: int = 0) -> Upload:
        """A new file beside ``path`` (its folder must exist; a file there is replaced, a
        folder or link is not) for exactly ``size`` bytes, owned by the desktop user:
        :meth:`Upload.finish` renames it over ``path``, :meth:`Upload.abort` removes it.
        :class:`HomeFull` when the home would hold more than ``quota_bytes`` afterwards (0:
        no quota); nothing is written then."""
        with self._parent(path) as (parent, name):
            replaced = 0
            try:
                old = os.stat(name, dir_fd=parent, follow_symlinks=False)
            except FileNotFoundError:
                pass
            else:
                _require_file(old.st_mode, path, "replaced by an upload")
                replaced = old.st_size
            if quota_bytes:
                used = self.used_bytes()
                if used - replaced + size > quota_bytes:
                    raise HomeFull(
                        f"Your home folder is full: {megabytes(used)} MB of "
                        f"{megabytes(quota_bytes)} MB used; this file needs {megabytes(size)} "
                        "MB. Delete files, then upload again."
                    )
            temporary = f"{TEMP_PREFIX}{secrets.token_hex(8)}"
            try:
                fd = os.open(temporary, _NEW_FILE_FLAGS, 0o644, dir_fd=parent)
            except OSError as error:
                if error.errno in (errno.ENOSPC, errno.EDQUOT):  # not even a new name fits
                    raise HomeFull(f"{HOME_FULL} ({shown(path)} was not saved.)") from None
                raise HomeFileError(
                    f"Cannot write in the folder of {shown(path)}: {error.strerror}."
                ) from None
            if os.geteuid() == 0:  # a non-root agent (simulated, development) keeps its uid
                os.fchown(fd, DESKTOP_UID, DESKTOP_GID)
            return Upload(os.dup(parent), fd, temporary, name, path, size)

    def delete(self, path: str) -> None:
        """Delete a file or link (the link only), or a folder and all it holds."""
        if not path:
            raise HomeFileError("Your home folder itself cannot be deleted.")
        if portal_own(path):
            raise HomeFileError(
                f"{shown(path)} holds the portal's own files for your desktops: it cannot be "
                "deleted."
            )
        with self._parent(path) as (parent, name):
            info = _lstat(parent, name, path)
            try:
                if stat.S_ISDIR(info.st_mode):
                    # With dir_fd, rmtree works on descriptors and never follows a link
                    # (shutil.rmtree.avoids_symlink_attacks on Linux).
                    shutil.rmtree(name, dir_fd=parent)
                else:
                    os.unlink(name, dir_fd=parent)
            except OSError as error:
                raise HomeFileError(f"Cannot delete {shown(path)}: {error.strerror}.") from None

    def used_bytes(self) -> int:
        """What the home holds: the sum of its regular files' sizes (the module's docstring)."""
        total = 0
        # follow_symlinks=False: fwalk never descends into a link, even one swapped in
        # for a folder while it walks.
        for _, _, files, folder in os.fwalk(".", dir_fd=self._fd, follow_symlinks=False):
            for name in files:
                try:
                    info = os.stat(name, dir_fd=folder, follow_symlinks=False)
                except OSError:
                    continue
                if stat.S_ISREG(info.st_mode):
                    total += min(info.st_size, info.st_blocks * 512)
        return total


def _not_a_folder(fd: int, name: str, path: str, error: OSError) -> HomeFileError:
    """Why ``name`` in folder ``fd`` could not be opened as a folder, as a sentence."""
    try:
        mode = os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode
    except FileNotFoundError:
        return HomeFileError(f"No folder named {shown(path)} in your home.")
    except OSError:
        mode = None
    if mode is not None and stat.S_ISLNK(mode):
        return HomeFileError(f"{shown(path)} is a link; links are not followed.")
    if mode is not None and not stat.S_ISDIR(mode):
        return HomeFileError(f"{shown(path)} is not a folder.")
    return HomeFileError(f"Cannot open the folder {shown(path)}: {error.strerror}.")


def _lstat(parent: int, name: str, path: str) -> os.stat_result:
    try:
        return os.stat(name, dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
        raise HomeFileError(f"No file or folder named {shown(path)} in your home.") from None
    except OSError as error:
        raise HomeFileError(f"Cannot read {shown(path)}: {error.strerror}.") from None


def _require_file(mode: int, path: str, what: str) -> None:
    kind = _kind(mode)
    if kind == "folder":
        raise HomeFileError(f"{shown(path)} is a folder; a folder cannot be {what}.")
    if kind == "link":
        raise HomeFileError(f"{shown(path)} is a link; a link cannot be {what}.")
    if kind != "file":
        raise HomeFileError(f"{shown(path)} is not a regular file; it cannot be {what}.")


class Upload:
    """A file on its way into a home (:meth:`HomeFolder.begin_upload`): written into a
    temporary file beside its target, renamed over it by :meth:`finish`; :meth:`abort` (a
    no-op once finished) removes it, so a broken upload leaves nothing."""

    def __init__(self, parent: int, fd: int, temporary: str, name: str, path: str, size: int):
        self._parent = parent
        self._fd = fd
        self._temporary = temporary
        self._name = name
        self.path = path
        self.size = size
        self.written = 0
        self.no_space = False  # the disk (or its quota) refused a write
        self._open = True

    def write(self, data: bytes) -> None:
        """Append ``data``; HomeFileError past ``size`` or when the disk says no."""
        if self.written + len(data) > self.size:
            raise HomeFileError(
                f"The upload of {shown(self.path)} sent more than its {self.size} bytes; try again."
            )
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(self._fd, view[:_CHUNK]) :]
        except OSError as error:
            raise self._write_error(error) from None
        self.written += len(data)

    def finish(self) -> None:
        """All ``size`` bytes came: on disk, then renamed over the target."""
        if self.written != self.size:
            raise HomeFileError(
                f"The upload of {shown(self.path)} was cut short ({self.written} of "
                f"{self.size} bytes); try again."
            )
        try:
            os.fsync(self._fd)
            os.rename(self._temporary, self._name, src_dir_fd=self._parent, dst_dir_fd=self._parent)
        except OSError as error:
            raise self._write_error(error) from None
        self._temporary = ""
        with suppress(OSError):
            os.fsync(self._parent)  # the rename, on disk
        self._close()

    def _write_error(self, error: OSError) -> HomeFileError:
        """Why a write failed, as a sentence: :data:`HOME_FULL` when the disk has no room."""
        self.no_space = error.errno in (errno.ENOSPC, errno.EDQUOT)
        if self.no_space:
            return HomeFileError(f"{HOME_FULL} ({shown(self.path)} was not saved.)")
        return HomeFileError(f"Cannot write {shown(self.path)}: {error.strerror}.")

    def abort(self) -> None:
        """Remove the temporary file, unless :meth:`finish` renamed it."""
        if self._temporary:
            _remove_quietly(self._temporary, self._parent)
            self._temporary = ""
        self._close()

    def _close(self) -> None:
        if self._open:
            self._open = False
            os.close(self._fd)
            os.close(self._parent)


def _remove_quietly(name: str, parent: int) -> None:
    with suppress(OSError):
        os.unlink(name, dir_fd=parent)
