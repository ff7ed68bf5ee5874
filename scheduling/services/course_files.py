"""Course folders (docs/course-files.md): the files an instructor, or a TA allowed to, puts
into a course's folder for every desktop of the course's people to see read-only.

A file's bytes are kept on the portal host's disk under ``settings.COURSE_FILES_ROOT``, named
by their sha256 (``blobs/<2 hex>/<sha256>``: one copy of the same bytes, whichever courses
hold them), never in the database. An upload is streamed: Django's upload handlers spool a
large one to a temporary file, and :func:`store_bytes` copies it in chunks while hashing it.
The database holds what each folder lists (:class:`~scheduling.models.CourseFile`) and its
version, one more at every change; node agents pull a folder once per version
(``scheduling.services.course_files_agent``).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.contrib.auth.models import User
from django.core.files.uploadedfile import UploadedFile
from django.db import transaction
from django.db.models import Count, F, Sum
from django.utils.translation import gettext as _

from nodeagent.protocol_files import HOME_NAME_MAX
from people.models import Course
from scheduling.choices import AuditKind
from scheduling.excerpt import excerpt
from scheduling.models import CourseFile, CourseFolder
from scheduling.models.course_files import COURSE_FILE_PATH_MAX

from ..locks import lock_course_folder
from . import NotFound, ServiceError
from .audit import record
from .course_files_agent import wake_nodes_of
from .teaching import CourseRole

MB = 1024 * 1024
CHUNK = 1024 * 1024
MAX_FILES_PER_UPLOAD = 100
MAX_CAP_MB = 1024 * 1024  # what the console takes as a course's cap: 1 TB


def _actor(user: User) -> str:
    return f"user:{user.get_username()}"


# --- names --------------------------------------------------------------------------------


def check_path(path: str) -> str:
    """A path inside a course folder (names joined by '/'), or ServiceError saying what to
    change: no absolute path, no '.' or '..', no empty name, no control character."""
    path = (path or "").strip()
    shown = excerpt(path)
    if not path:
        raise ServiceError(_("Give the file a name."), field="files")
    if any(ord(c) < 32 or ord(c) == 127 for c in path):
        raise ServiceError(
            _("“%(name)s”: a name cannot hold control characters (a new line, a tab).")
            % {"name": shown.encode("unicode_escape").decode()},
            field="files",
        )
    if path.startswith("/"):
        raise ServiceError(
            _("“%(name)s”: give a name inside the course folder, not one starting with “/”.")
            % {"name": shown},
            field="files",
        )
    parts = path.split("/")
    if any(part in ("", ".", "..") for part in parts):
        raise ServiceError(
            _("“%(name)s”: a name cannot be “.” or “..”, nor hold an empty part (“//”).")
            % {"name": shown},
            field="files",
        )
    if len(path) > COURSE_FILE_PATH_MAX or any(len(p.encode()) > HOME_NAME_MAX for p in parts):
        raise ServiceError(
            _("“%(name)s” is too long: at most %(name_max)s bytes a name.")
            % {"name": shown, "name_max": HOME_NAME_MAX},
            field="files",
        )
    return path


# --- the folder and its cap -----------------------------------------------------------------


def cap_mb(course: Course) -> int:
    """The course's cap in MB: the console's, else DESKPOOL_COURSE_FOLDER_MB."""
    cap = CourseFolder.objects.filter(course=course).values_list("cap_mb", flat=True).first()
    return cap if cap is not None else settings.COURSE_FOLDER_MB


def used_bytes(course: Course) -> int:
    return CourseFile.objects.filter(course=course).aggregate(total=Sum("size"))["total"] or 0


@dataclass(frozen=True)
class FolderView:
    """What the course page shows: the files, and the total against the cap."""

    files: list[CourseFile]
    used_bytes: int
    cap_bytes: int
    file_max_bytes: int


def folder_view(course: Course) -> FolderView:
    files = list(CourseFile.objects.filter(course=course).select_related("uploaded_by"))
    return FolderView(
        files=files,
        used_bytes=sum(f.size for f in files),
        cap_bytes=cap_mb(course) * MB,
        file_max_bytes=settings.COURSE_FILE_MAX_MB * MB,
    )


def check_cap(value: int | str | None) -> int | None:
    """A course folder's cap from the console: MB from 1 (a number, or the digits a form sent),
    or None (or an empty field) for the default."""
    if isinstance(value, str):
        value = value.strip()
        if value and not (value.isascii() and value.isdigit()):
            raise ServiceError(
                _("Enter the cap as a whole number of MB, or leave it empty for the default."),
                field="cap_mb",
            )
        value = int(value) if value else None
    if value is not None and not 1 <= value <= MAX_CAP_MB:
        raise ServiceError(
            _("Enter a cap from 1 to %(max)s MB, or leave it empty for the default.")
            % {"max": MAX_CAP_MB},
            field="cap_mb",
        )
    return value


def folders_with_use() -> list[Course]:
    """Every course with its folder's file count, bytes used and cap (None: the default),
    for the console's course folders page: one query."""
    return list(
        Course.objects.annotate(
            file_count=Count("files", distinct=True),
            used=Sum("files__size"),
            cap_mb=F("folder__cap_mb"),
        )
    )


def do_set_cap(actor: User, course: Course, value: int | None) -> None:
    """Set the course folder's cap (None: the default), audited. Files already there stay."""
    with transaction.atomic():
        folder = lock_course_folder(course.pk)
        before = folder.cap_mb
        folder.cap_mb = value
        folder.save(update_fields=["cap_mb"])
        record(
            AuditKind.COURSE_FOLDER_CAP_CHANGED,
            _actor(actor),
            data={"course": course.code, "before": before, "after": value},
        )


# --- the store ------------------------------------------------------------------------------


def blob_path(sha256: str) -> Path:
    return Path(settings.COURSE_FILES_ROOT) / "blobs" / sha256[:2] / sha256


def store_bytes(upload: UploadedFile) -> tuple[str, int]:
    """Copy the upload into the store in chunks, hashing it: (sha256, size). Bytes already
    there (the same file in another course, or uploaded again) are kept once."""
    root = Path(settings.COURSE_FILES_ROOT)
    (root / "tmp").mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    size = 0
    fd, name = tempfile.mkstemp(dir=root / "tmp", prefix="upload-")
    try:
        with os.fdopen(fd, "wb") as out:
            for chunk in upload.chunks(CHUNK):
                digest.update(chunk)
                size += len(chunk)
                out.write(chunk)
        sha256 = digest.hexdigest()
        target = blob_path(sha256)
        target.parent.mkdir(parents=True, exist_ok=True)
        os.chmod(name, 0o444)
        os.replace(name, target)  # atomic: a reader sees all of it or none
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name)
    return sha256, size


def _forget_bytes(shas: Iterable[str]) -> None:
    """Delete stored bytes no course file names any more."""
    shas = set(shas)
    kept = set(CourseFile.objects.filter(sha256__in=shas).values_list("sha256", flat=True))
    for sha256 in shas - kept:
        with contextlib.suppress(FileNotFoundError):
            blob_path(sha256).unlink()


# --- upload and delete ------------------------------------------------------------------------


def _may_manage(role: CourseRole | None) -> CourseRole:
    if role is None or not (role.teacher or role.manage_course_files):
        raise NotFound(_("No such course among the ones you may put files into."))
    return role


@dataclass(frozen=True)
class UploadPlan:
    course: Course
    files: list[tuple[str, UploadedFile]]  # (path in the folder, the upload)


def check_upload(
    role: CourseRole | None, uploads: Sequence[UploadedFile], folder: str = ""
) -> UploadPlan:
    """Files to put into the course's folder (under ``folder``, '' for the top): names,
    sizes and the cap checked; ServiceError with a sentence otherwise."""
    role = _may_manage(role)
    if not uploads:
        raise ServiceError(_("Choose one or more files to upload."), field="files")
    if len(uploads) > MAX_FILES_PER_UPLOAD:
        raise ServiceError(
            _("Upload at most %(max)s files at once.") % {"max": MAX_FILES_PER_UPLOAD},
            field="files",
        )
    folder = folder.strip().rstrip("/") if folder else ""  # "week1/" is "week1"; "/x" is refused
    if folder:
        check_path(folder)
    file_max = settings.COURSE_FILE_MAX_MB * MB
    files: list[tuple[str, UploadedFile]] = []
    for upload in uploads:
        path = check_path(f"{folder}/{upload.name}" if folder else str(upload.name or ""))
        if (upload.size or 0) > file_max:
            raise ServiceError(
                _("“%(name)s” is too large: one file may be at most %(max)s MB.")
                % {"name": excerpt(path), "max": settings.COURSE_FILE_MAX_MB},
                field="files",
            )
        files.append((path, upload))
    paths = [p for p, _u in files]
    if len(set(paths)) != len(paths):
        raise ServiceError(_("Two of the files have the same name."), field="files")
    _check_no_clash(role.course, paths)
    _check_fits(role.course, {p: u.size or 0 for p, u in files})
    return UploadPlan(role.course, files)


def _check_no_clash(course: Course, paths: list[str]) -> None:
    """No file where another needs a folder of that name (``a`` beside ``a/b``)."""
    listed = set(CourseFile.objects.filter(course=course).values_list("path", flat=True))
    wanted = set(paths)
    for path in paths:
        parts = path.split("/")
        folders = {"/".join(parts[:i]) for i in range(1, len(parts))}
        under = path + "/"
        if folders & (listed | wanted) or any(p.startswith(under) for p in listed | wanted):
            raise ServiceError(
                _("“%(name)s”: the course folder has a file and a folder of that name. Rename one.")
                % {"name": excerpt(path)},
                field="files",
            )


def _check_fits(course: Course, sizes: dict[str, int]) -> None:
    """The folder with these files (replacing those of the same path) stays within its cap."""
    replaced = CourseFile.objects.filter(course=course, path__in=list(sizes))
    after = used_bytes(course) - sum(f.size for f in replaced) + sum(sizes.values())
    cap = cap_mb(course)
    if after > cap * MB:
        raise ServiceError(
            _(
                "These files do not fit: the course folder would hold %(after)s MB, over its cap "
                "of %(cap)s MB. Delete files first, or ask an admin for a larger cap."
            )
            % {"after": round(after / MB, 1), "cap": cap},
            field="files",
        )


def do_upload(actor: User, plan: UploadPlan) -> list[CourseFile]:
    """Store the files' bytes, then list them in the folder (a file of the same path is
    replaced), one version more, audited; the nodes running its desktops are woken."""
    course = plan.course
    stored = [(path, *store_bytes(upload)) for path, upload in plan.files]
    try:
        return _list_stored(actor, course, stored)
    except ServiceError:
        # Another upload filled the folder since the check: these bytes stay unnamed.
        _forget_bytes(sha256 for _path, sha256, _size in stored)
        raise


def _list_stored(
    actor: User, course: Course, stored: list[tuple[str, str, int]]
) -> list[CourseFile]:
    """List the stored files in the folder (a file of the same path is replaced), one
    version more, audited, the nodes woken; the cap checked again under the lock."""
    with transaction.atomic():
        folder = lock_course_folder(course.pk)
        _check_fits(course, {path: size for path, _sha, size in stored})  # under the lock
        before = dict(
            CourseFile.objects.filter(
                course=course, path__in=[p for p, _s, _z in stored]
            ).values_list("path", "sha256")
        )
        rows = []
        for path, sha256, size in stored:
            row, _created = CourseFile.objects.update_or_create(
                course=course,
                path=path,
                defaults={"size": size, "sha256": sha256, "uploaded_by": actor},
            )
            rows.append(row)
            record(
                AuditKind.COURSE_FILE_UPLOADED,
                _actor(actor),
                data={
                    "course": course.code,
                    "path": path,
                    "size": size,
                    "sha256": sha256,
                    "replaced": path in before,
                },
            )
        folder.version += 1
        folder.save(update_fields=["version"])
        wake_nodes_of(course)
        transaction.on_commit(lambda: _forget_bytes(before.values()))
    return rows


def do_delete(actor: User, role: CourseRole | None, file_id: int) -> CourseFile:
    """Delete one file of the course's folder, audited; one version more."""
    course = _may_manage(role).course
    with transaction.atomic():
        folder = lock_course_folder(course.pk)
        row = CourseFile.objects.filter(course=course, pk=file_id).first()
        if row is None:
            raise NotFound(_("This file is no longer in the course folder."))
        row.delete()
        record(
            AuditKind.COURSE_FILE_DELETED,
            _actor(actor),
            data={"course": course.code, "path": row.path, "size": row.size},
        )
        folder.version += 1
        folder.save(update_fields=["version"])
        wake_nodes_of(course)
        sha256 = row.sha256
        transaction.on_commit(lambda: _forget_bytes([sha256]))
    return row
