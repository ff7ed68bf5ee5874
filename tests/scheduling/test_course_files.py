"""Course folders' service (docs/course-files.md) on PostgreSQL: who may put files in, the
names and sizes refused, the cap, the audit, the store, and which desktops get the folder."""

from __future__ import annotations

import hashlib

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import transaction
from guardian.shortcuts import assign_perm

from people.models import Course
from scheduling.choices import AuditKind, SessionState
from scheduling.models import AuditEvent, CourseFile, CourseFolder, Session
from scheduling.services import NotFound, ServiceError
from scheduling.services.agent_sessions import desired_sessions
from scheduling.services.course_files import (
    MB,
    blob_path,
    check_cap,
    check_path,
    check_upload,
    do_delete,
    do_set_cap,
    do_upload,
    folder_view,
)
from scheduling.services.course_files_agent import folders_of_people, manifest_for
from scheduling.services.teaching import course_role

from ..conftest import gpu_inventory

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _commits_at_once(monkeypatch):  # type: ignore[no-untyped-def]
    """What waits for the commit (freeing bytes no file names any more, waking nodes) runs at
    once: the test's transaction never commits."""
    monkeypatch.setattr(transaction, "on_commit", lambda run, *args, **kwargs: run())


@pytest.fixture(autouse=True)
def store(settings, tmp_path):  # type: ignore[no-untyped-def]
    settings.COURSE_FILES_ROOT = tmp_path / "course-files"
    settings.COURSE_FOLDER_MB = 4
    settings.COURSE_FILE_MAX_MB = 2
    return settings.COURSE_FILES_ROOT


@pytest.fixture
def people(make_user):  # type: ignore[no-untyped-def]
    teacher, student, other = make_user("prof"), make_user("alice"), make_user("bob")
    course = Course.objects.create(code="cs101", title="GPUs")
    course.instructors.add(teacher)
    course.students.add(student)
    art = Course.objects.create(code="art200", title="Painting")
    art.students.add(other)
    return teacher, student, other, course, art


def upload(name: str, data: bytes = b"hello\n") -> SimpleUploadedFile:
    return SimpleUploadedFile(name, data, content_type="application/octet-stream")


def put(user, course, *files, folder=""):  # type: ignore[no-untyped-def]
    return do_upload(user, check_upload(course_role(user, course), list(files), folder))


def test_an_instructors_upload_is_stored_by_sha256_listed_versioned_and_audited(people, store):
    teacher, _, _, course, _ = people
    [row] = put(teacher, course, upload("notes.txt", b"week 1\n"))
    sha = hashlib.sha256(b"week 1\n").hexdigest()
    assert (row.path, row.size, row.sha256, row.uploaded_by) == ("notes.txt", 7, sha, teacher)
    assert blob_path(sha).read_bytes() == b"week 1\n"
    assert str(blob_path(sha)).startswith(str(store))
    assert CourseFolder.objects.get(course=course).version == 1
    event = AuditEvent.objects.get(kind=AuditKind.COURSE_FILE_UPLOADED)
    assert event.actor == "user:prof"
    assert event.data == {
        "course": "cs101", "path": "notes.txt", "size": 7, "sha256": sha, "replaced": False,
    }  # fmt: skip
    view = folder_view(course)
    assert (view.used_bytes, view.cap_bytes, view.file_max_bytes) == (7, 4 * MB, 2 * MB)

    # The same name again replaces it; the old bytes, no longer named, leave the store.
    put(teacher, course, upload("notes.txt", b"week 1, fixed\n"))
    assert CourseFile.objects.get(course=course).size == 14
    assert not blob_path(sha).exists()
    assert CourseFolder.objects.get(course=course).version == 2


def test_sub_folders_and_several_files_at_once(people):
    teacher, _, _, course, _ = people
    put(teacher, course, upload("a.csv"), upload("b.csv"), folder="week1/data/")
    assert list(CourseFile.objects.values_list("path", flat=True)) == [
        "week1/data/a.csv",
        "week1/data/b.csv",
    ]


def test_who_may_put_files_in(people, make_user):
    teacher, student, other, course, _ = people
    helper, watcher, admin = make_user("tina"), make_user("tom"), make_user("root", is_staff=True)
    assign_perm("portal.manage_course_files", helper, course)
    assign_perm("portal.view_live_class", watcher, course)
    put(helper, course, upload("from-ta.txt"))  # a TA with the right
    put(admin, course, upload("from-admin.txt"))
    for refused in (watcher, student, other):  # a TA without it, the course's student, others
        with pytest.raises(NotFound):
            check_upload(course_role(refused, course), [upload("x.txt")])
    row = CourseFile.objects.get(path="from-ta.txt")
    with pytest.raises(NotFound):
        do_delete(student, course_role(student, course), row.pk)
    assert CourseFile.objects.count() == 2


@pytest.mark.parametrize(
    ("path", "words"),
    [
        ("../secret", "“..”"),
        ("a/../../b", "“..”"),
        ("/etc/passwd", "starting with “/”"),
        ("a//b", "“//”"),
        ("bad\nname", "control characters"),
        ("tab\there", "control characters"),
        ("", "Give the file a name"),
        ("x" * 256, "too long"),
    ],
)
def test_bad_names_are_refused_with_a_sentence(path, words):
    with pytest.raises(ServiceError) as refused:
        check_path(path)
    assert words in refused.value.message


def test_a_file_and_a_folder_of_one_name_are_refused(people):
    teacher, _, _, course, _ = people
    put(teacher, course, upload("data"))
    role = course_role(teacher, course)
    with pytest.raises(ServiceError, match="a file and a folder of that name"):
        check_upload(role, [upload("x.csv")], "data")
    put(teacher, course, upload("x.csv"), folder="week1")
    with pytest.raises(ServiceError, match="a file and a folder of that name"):
        check_upload(role, [upload("week1")])


def test_a_bad_sub_folder_is_refused_and_nothing_is_stored(people, store):
    teacher, _, _, course, _ = people
    with pytest.raises(ServiceError, match="“..”"):
        check_upload(course_role(teacher, course), [upload("a.txt")], "../../etc")
    assert not CourseFile.objects.exists() and not (store / "blobs").exists()


def test_a_file_over_the_limit_and_a_folder_over_its_cap_are_refused(people, admin_user):
    teacher, _, _, course, _ = people
    role = course_role(teacher, course)
    with pytest.raises(ServiceError, match="one file may be at most 2 MB"):
        check_upload(role, [upload("big.bin", b"x" * (2 * MB + 1))])
    put(teacher, course, upload("one.bin", b"x" * (2 * MB)), upload("two.bin", b"y" * MB))
    with pytest.raises(ServiceError, match="over its cap of 4 MB"):
        check_upload(role, [upload("three.bin", b"z" * (MB + 1))])
    # Replacing a file counts its new size only.
    check_upload(role, [upload("two.bin", b"z" * (2 * MB))])

    # The console's cap: audited; a smaller one refuses what no longer fits.
    with pytest.raises(ServiceError, match="from 1 to"):
        check_cap(0)
    for typed in ("12 MB", "-3", "\uff13"):  # the form's text: digits 0-9 only
        with pytest.raises(ServiceError, match="whole number of MB"):
            check_cap(typed)
    assert check_cap(" ") is None and check_cap(" 40 ") == 40
    do_set_cap(admin_user, course, check_cap(3))
    event = AuditEvent.objects.get(kind=AuditKind.COURSE_FOLDER_CAP_CHANGED)
    assert event.data == {"course": "cs101", "before": None, "after": 3}
    assert folder_view(course).cap_bytes == 3 * MB
    with pytest.raises(ServiceError, match="over its cap of 3 MB"):
        check_upload(role, [upload("small.txt")])


def test_an_upload_that_no_longer_fits_when_stored_leaves_no_bytes(people, store):
    """Checked, then another upload fills the folder: the cap is checked again under the
    folder's lock, and the bytes stored for the refused upload are deleted."""
    teacher, _, _, course, _ = people
    role = course_role(teacher, course)
    late = check_upload(role, [upload("late.bin", b"l" * (2 * MB))])
    put(teacher, course, upload("first.bin", b"f" * (2 * MB)), upload("second.bin", b"s" * MB))
    with pytest.raises(ServiceError, match="over its cap"):
        do_upload(teacher, late)
    assert not CourseFile.objects.filter(path="late.bin").exists()
    assert not blob_path(hashlib.sha256(b"l" * (2 * MB)).hexdigest()).exists()
    assert not list((store / "tmp").iterdir())


def test_delete_is_audited_versioned_and_frees_the_bytes(people):
    teacher, _, _, course, _ = people
    [row] = put(teacher, course, upload("old.txt", b"old\n"))
    do_delete(teacher, course_role(teacher, course), row.pk)
    assert not CourseFile.objects.exists()
    assert not blob_path(row.sha256).exists()
    assert CourseFolder.objects.get(course=course).version == 2
    event = AuditEvent.objects.get(kind=AuditKind.COURSE_FILE_DELETED)
    assert event.data == {"course": "cs101", "path": "old.txt", "size": 4}
    with pytest.raises(NotFound, match="no longer"):
        do_delete(teacher, course_role(teacher, course), row.pk)


def test_without_course_files_the_desired_state_pays_one_query(people, django_assert_num_queries):
    _, student, other, _, _ = people
    with django_assert_num_queries(1):
        assert folders_of_people([student.pk, other.pk]) == {}


def test_only_the_courses_people_get_the_folder_and_only_their_nodes_read_it(
    people, make_user, register_node, profile
):
    teacher, student, other, course, art = people
    ta = make_user("tina")
    assign_perm("portal.view_live_class", ta, course)
    assert folders_of_people([student.pk]) == {}  # an empty folder is no folder
    put(teacher, course, upload("notes.txt"))
    folders = folders_of_people([student.pk, other.pk, teacher.pk, ta.pk])
    for person in (student, teacher, ta):
        assert [(r.id, r.code, r.version) for r in folders[person.pk]] == [(course.pk, "cs101", 1)]
    assert other.pk not in folders  # a student of another course

    node, _ = register_node("gpu-1", [gpu_inventory("GPU-1", 0, mig_slices=2)])
    elsewhere, _ = register_node("gpu-2", [gpu_inventory("GPU-2", 0, mig_slices=2)])
    for user, where in ((student, node), (other, elsewhere)):
        Session.objects.create(
            user=user, profile=profile, purpose="hobby", state=SessionState.RUNNING, node=where,
            vnc_password="pw345678",
        )  # fmt: skip
    [alice] = desired_sessions(node)
    assert [r.code for r in alice.courses] == ["cs101"]
    [bob] = desired_sessions(elsewhere)
    assert bob.courses == []
    manifest = manifest_for(node, course.pk)
    assert [(f.path, f.size) for f in manifest.files] == [("notes.txt", 6)]
    with pytest.raises(NotFound):
        manifest_for(elsewhere, course.pk)  # runs only a desktop of another course's student
    with pytest.raises(NotFound):
        manifest_for(node, art.pk)
