"""Course folders as the nodes see them (docs/course-files.md): which folders each desktop
gets (``DesiredSession.courses``), and the manifest and bytes a node may pull
(``portal/agents/course_files.py``; the wire is ``nodeagent/protocol_courses.py``).

Who gets a course's folder: its enrolled students, its instructors and its TAs (any TA
right), once the folder holds a file. Admins get no folder for being admins. A node may read a
folder only while it runs (or is starting) a desktop of one of those people: any other node is
answered 404, as if the course did not exist.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

from django.contrib.contenttypes.models import ContentType
from django.utils.translation import gettext as _
from guardian.models import UserObjectPermission

from nodeagent.protocol_courses import CourseFileEntry, CourseFolderRef, CourseManifest
from people.models import Course
from scheduling.choices import ON_NODE_STATES
from scheduling.models import CourseFile, CourseFolder, Node, Session

from . import NotFound
from .agent_wake import wake_nodes
from .teaching import TA_PERMISSIONS


def course_ids_of_people(
    user_ids: Iterable[int], among: Iterable[int] | None = None
) -> dict[int, set[int]]:
    """user id -> the ids of the courses whose folder they get (enrolled, teaching, TA),
    ``among`` these courses only when given."""
    ids = set(user_ids)
    found: dict[int, set[int]] = defaultdict(set)
    if not ids:
        return found
    courses = None if among is None else set(among)
    for through in (Course.students.through, Course.instructors.through):
        rows = through.objects.filter(user_id__in=ids)
        if courses is not None:
            rows = rows.filter(course_id__in=courses)
        for user_id, course_id in rows.values_list("user_id", "course_id"):
            found[user_id].add(course_id)
    granted = UserObjectPermission.objects.filter(
        content_type=ContentType.objects.get_for_model(Course),
        permission__codename__in=list(TA_PERMISSIONS),
        user_id__in=ids,
    )
    if courses is not None:
        granted = granted.filter(object_pk__in=[str(c) for c in courses])
    for user_id, object_pk in granted.values_list("user_id", "object_pk"):
        found[user_id].add(int(object_pk))
    return found


def folders_of_people(user_ids: Iterable[int]) -> dict[int, list[CourseFolderRef]]:
    """user id -> the course folders (with files) their desktops get, by course code. One
    query when no course folder holds a file (a desired state asks at every answer)."""
    ids = set(user_ids)
    if not ids:
        return {}
    refs = {
        course_id: CourseFolderRef(id=course_id, code=code, version=version)
        for course_id, code, version in CourseFolder.objects.filter(
            version__gt=0, course__files__isnull=False
        )
        .distinct()
        .values_list("course_id", "course__code", "version")
    }
    if not refs:
        return {}
    found = {
        user_id: sorted((refs[c] for c in courses), key=lambda r: r.code)
        for user_id, courses in course_ids_of_people(ids, among=refs).items()
    }
    return {user_id: listed for user_id, listed in found.items() if listed}


def _people_of(course: Course) -> set[int]:
    ids = set(course.students.values_list("pk", flat=True))
    ids |= set(course.instructors.values_list("pk", flat=True))
    course_type = ContentType.objects.get_for_model(Course)
    ids |= set(
        UserObjectPermission.objects.filter(
            content_type=course_type,
            object_pk=str(course.pk),
            permission__codename__in=list(TA_PERMISSIONS),
        ).values_list("user_id", flat=True)
    )
    return ids


def wake_nodes_of(course: Course) -> None:
    """Wake (after commit) the nodes running desktops of the course's people: their desired
    state now names the folder's new version."""
    nodes = Session.objects.filter(
        user_id__in=_people_of(course), state__in=ON_NODE_STATES, node__isnull=False
    ).values_list("node_id", flat=True)
    wake_nodes(set(nodes))


def node_may_read(node: Node, course_id: int) -> bool:
    """Whether the node runs (or is starting) a desktop that gets this course's folder."""
    users = Session.objects.filter(node=node, state__in=ON_NODE_STATES).values_list(
        "user_id", flat=True
    )
    return any(course_id in ids for ids in course_ids_of_people(users).values())


def _not_found(course_id: int) -> NotFound:
    return NotFound(_("Course %(id)s has no folder for this node.") % {"id": course_id})


def manifest_for(node: Node, course_id: int) -> CourseManifest:
    """The folder's files at its version, for a node that may read it; else NotFound."""
    folder = CourseFolder.objects.filter(course_id=course_id).select_related("course").first()
    if folder is None or not node_may_read(node, course_id):
        raise _not_found(course_id)
    files = CourseFile.objects.filter(course_id=course_id).values_list("path", "size", "sha256")
    return CourseManifest(
        id=course_id,
        code=folder.course.code,
        version=folder.version,
        files=[CourseFileEntry(path=p, size=s, sha256=h) for p, s, h in files],
    )


def file_for(node: Node, course_id: int, sha256: str, store: Path) -> Path:
    """Where the bytes of one of the folder's files lie (``store``: the blob path of
    ``sha256``), for a node that may read the folder; else NotFound."""
    listed = CourseFile.objects.filter(course_id=course_id, sha256=sha256).exists()
    if not listed or not node_may_read(node, course_id) or not store.is_file():
        raise _not_found(course_id)
    return store
