"""The course page's folder (docs/course-files.md): the instructor, and a TA with the right,
list, upload and delete; a TA without it and the course's students get 404; a refusal is a
sentence on the page (400), never a 500."""

from __future__ import annotations

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import transaction
from django.test import Client
from guardian.shortcuts import assign_perm

from people.models import Course
from scheduling.choices import AuditKind
from scheduling.models import AuditEvent, CourseFile

pytestmark = pytest.mark.django_db
UPLOAD = "/courses/cs101/files/upload/"


@pytest.fixture(autouse=True)
def _store(settings, tmp_path, monkeypatch):  # type: ignore[no-untyped-def]
    settings.COURSE_FILES_ROOT = tmp_path / "course-files"
    settings.COURSE_FOLDER_MB = 1
    monkeypatch.setattr(transaction, "on_commit", lambda run, *args, **kwargs: run())


@pytest.fixture
def people(make_user):  # type: ignore[no-untyped-def]
    teacher, student = make_user("prof"), make_user("alice")
    course = Course.objects.create(code="cs101", title="GPUs")
    course.instructors.add(teacher)
    course.students.add(student)
    helper, watcher = make_user("tina"), make_user("tom")
    assign_perm("portal.manage_course_files", helper, course)
    assign_perm("portal.view_live_class", watcher, course)
    return teacher, student, helper, watcher


def signed_in(user) -> Client:  # type: ignore[no-untyped-def]
    client = Client()
    client.force_login(user)
    return client


def files(*names: str) -> list[SimpleUploadedFile]:
    return [SimpleUploadedFile(name, f"{name}\n".encode()) for name in names]


def test_the_instructor_uploads_lists_and_deletes(people):
    teacher, *_ = people
    client = signed_in(teacher)
    page = client.get("/courses/cs101/")
    assert 'id="course-files"' in page.content.decode()
    assert "The course folder is empty." in page.content.decode()

    sent = client.post(UPLOAD, {"files": files("a.txt", "b.txt"), "folder": "week1"})
    assert sent.status_code == 302 and sent["Location"].endswith("/courses/cs101/#course-files")
    listed = client.get("/courses/cs101/").content.decode()
    assert "week1/a.txt" in listed and "week1/b.txt" in listed and "prof" in listed
    assert "of 1.0\xa0MB used." in listed

    row = CourseFile.objects.get(path="week1/a.txt")
    url = f"/courses/cs101/files/{row.pk}/delete/"
    asked = client.post(url)  # not confirmed: the page asks first, nothing is deleted
    assert asked.status_code == 200 and CourseFile.objects.filter(pk=row.pk).exists()
    assert client.post(url, {"confirmed": "1"}).status_code == 302
    assert list(CourseFile.objects.values_list("path", flat=True)) == ["week1/b.txt"]
    kinds = list(AuditEvent.objects.filter(kind__startswith="course.file").values_list("kind"))
    assert kinds.count((AuditKind.COURSE_FILE_UPLOADED,)) == 2
    assert kinds.count((AuditKind.COURSE_FILE_DELETED,)) == 1


def test_a_ta_with_the_right_may_and_others_get_404(people):
    teacher, student, helper, watcher = people
    assert signed_in(helper).post(UPLOAD, {"files": files("ta.txt")}).status_code == 302
    page = signed_in(helper).get("/courses/cs101/").content.decode()
    assert "ta.txt" in page  # the TA's course page shows the folder
    assert 'id="course-files"' not in signed_in(watcher).get("/courses/cs101/").content.decode()
    for refused in (watcher, student):
        assert signed_in(refused).post(UPLOAD, {"files": files("x.txt")}).status_code == 404
        row = CourseFile.objects.get()
        url = f"/courses/cs101/files/{row.pk}/delete/"
        assert signed_in(refused).post(url, {"confirmed": "1"}).status_code == 404
    assert list(CourseFile.objects.values_list("path", flat=True)) == ["ta.txt"]


@pytest.mark.parametrize(
    ("data", "words"),
    [
        ({"folder": "../x"}, "cannot be “.” or “..”"),
        ({"folder": "/etc"}, "not one starting with “/”"),
        ({"folder": "a\tb"}, "control characters"),
        ({}, "Choose one or more files"),
    ],
)
def test_refusals_are_sentences_on_the_page(people, data, words, caplog):
    teacher, *_ = people
    body = {**data} if not data or "folder" not in data else {"files": files("a.txt"), **data}
    answer = signed_in(teacher).post(UPLOAD, body)
    assert answer.status_code == 400
    assert words in answer.content.decode()
    assert not CourseFile.objects.exists()
    assert "Traceback" not in caplog.text


def test_over_the_cap_is_refused_with_the_numbers(people):
    teacher, *_ = people
    big = SimpleUploadedFile("big.bin", b"x" * (1024 * 1024 + 1))
    answer = signed_in(teacher).post(UPLOAD, {"files": [big]})
    assert answer.status_code == 400
    assert "over its cap of 1 MB" in answer.content.decode()


def test_an_admin_sets_a_courses_cap_on_the_console(people, admin_user):
    teacher, *_ = people
    client = signed_in(admin_user)
    page = client.get("/console/course-folders/")
    assert page.status_code == 200 and "cs101" in page.content.decode()
    assert signed_in(teacher).get("/console/course-folders/").status_code == 404
    course = Course.objects.get(code="cs101")
    url = f"/console/course-folders/{course.pk}/cap/"
    for bad in ("0", "lots", "-5"):
        refused = client.post(url, {"cap_mb": bad})
        assert refused.status_code == 400 and 'id="course-folder-error"' in refused.content.decode()
    assert client.post(url, {"cap_mb": "3"}).status_code == 302
    event = AuditEvent.objects.get(kind=AuditKind.COURSE_FOLDER_CAP_CHANGED)
    assert event.actor == "user:root"
    assert event.data == {"course": "cs101", "before": None, "after": 3}
    assert 'value="3"' in client.get("/console/course-folders/").content.decode()
    assert client.post(url, {"cap_mb": ""}).status_code == 302  # back to the default
    assert 'value=""' in client.get("/console/course-folders/").content.decode()
    assert client.post("/console/course-folders/999999/cap/", {"cap_mb": "3"}).status_code == 404
