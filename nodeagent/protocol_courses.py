"""The agent protocol's course folders (docs/course-files.md): which folders a desktop gets,
and how the agent pulls them. Part of the one definition of the wire with
:mod:`nodeagent.protocol` (``DesiredSession.courses`` lists a session's folders). No Django.

A course folder's files are uploaded to the portal once; each node that runs a desktop of one
of the course's people pulls the folder once per version (under ``/api/agent/v1/``, node
token):

``GET courses/<course_id>/manifest/``
    -> :class:`CourseManifest`: the folder's files (path, size, sha256) at its version.
``GET courses/<course_id>/files/<sha256>/``
    -> the file's bytes (``application/octet-stream``), whole.

Both answer 404 (:class:`~nodeagent.protocol.DetailAnswer`) to a node that runs no desktop
needing that folder, as if the course did not exist: a node is trusted only for itself.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, Field

from .protocol_files import BYTES_MAX, HomePath
from .wire_types import ID_MAX, PortalMessage

# Where a desktop sees a course's folder, read-only: COURSES_MOUNT/<course code>.
COURSES_MOUNT = "/courses"
COURSE_FILES_MAX = 10000  # files in one course folder
SHA256_PATTERN = r"^[0-9a-f]{64}$"
_CODE = re.compile(r"^[-a-zA-Z0-9_]{1,40}$")  # a course code (a Django slug, COURSE_CODE_MAX)


def course_code(value: str) -> str:
    """A course code as a folder name: a slug (letters, digits, '-', '_'), 1 to 40 long."""
    if not _CODE.match(value):
        raise ValueError("must be a course code: letters, digits, '-' and '_', 1 to 40 long")
    return value


CourseCode = Annotated[str, AfterValidator(course_code)]


class CourseFolderRef(PortalMessage):
    """One course folder a session's desktop gets at ``/courses/<code>``, read-only."""

    id: int = Field(ge=1, le=ID_MAX, description="The course's id.")
    code: CourseCode
    version: int = Field(ge=1, description="One more at every change of the folder.")


# DesiredSession.courses: the folders a session's desktop gets; absent when none.
CourseFolders = Annotated[
    list[CourseFolderRef], Field(description="Course folders to mount read-only, by code.")
]


class CourseFileEntry(PortalMessage):
    path: HomePath = Field(min_length=1, description="Names joined by '/', inside the folder.")
    size: int = Field(ge=0, le=BYTES_MAX)
    sha256: str = Field(pattern=SHA256_PATTERN, description="Also the name to GET it by.")


class CourseManifest(PortalMessage):
    """``GET courses/<id>/manifest/``: what the folder holds at ``version``."""

    id: int = Field(ge=1, le=ID_MAX)
    code: CourseCode
    version: int = Field(ge=0)
    files: list[CourseFileEntry] = Field(max_length=COURSE_FILES_MAX)
