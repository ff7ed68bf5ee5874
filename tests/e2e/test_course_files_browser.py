"""The course folder on the course page, in a real browser against the real stack (daphne,
PostgreSQL): the instructor uploads a file in English and in Chinese, sees it listed with its
size and uploader, deletes it after the question, and every step passes axe-core. The bytes
land in the portal's store under their sha256 (docs/course-files.md), audited."""

from __future__ import annotations

import hashlib

import pytest
from django.utils import translation

from people.models import Course, Member
from scheduling.choices import AuditKind
from scheduling.models import AuditEvent, CourseFile

from .axe import check_axe, describe
from .conftest import log_in

NAMES = {"en": "week 1 notes.txt", "zh-hans": "第一周 讲义.txt"}


@pytest.fixture
def course(stack, make_user):
    teacher = make_user("prof")
    course = Course.objects.create(code="cs101", title="Intro")
    course.instructors.add(teacher)
    course.students.add(make_user("s1"))
    return course


def words(language: str, text: str) -> str:
    """``text`` as the page shows it to a reader of ``language`` (the portal's catalogue)."""
    with translation.override(language):
        return translation.gettext(text)


@pytest.mark.browser
@pytest.mark.integration
def test_the_instructor_uploads_and_deletes_a_course_file_in_both_languages(
    stack, course, new_page
):
    teacher = course.instructors.get()
    asked: list[str] = []
    for language in ("en", "zh-hans"):
        Member.objects.update_or_create(user=teacher, defaults={"language": language})
        page = new_page()  # a browser of its own: the language is the saved one
        log_in(page, "prof", "pw-prof")
        assert page.goto("/courses/cs101/").status == 200
        assert page.get_attribute("html", "lang") == language
        section = page.locator("#course-files")
        assert section.locator("h2").inner_text() == words(language, "Course folder")
        violations = check_axe(page, f"course-files-{language}-empty")
        assert not violations, describe(violations)

        name = NAMES[language]
        data = f"{language}: read chapter 2 before class\n".encode() * 40
        page.set_input_files(
            "#course-files-input", files=[{"name": name, "mimeType": "text/plain", "buffer": data}]
        )
        page.fill("#course-files-folder", "week1")
        with page.expect_navigation():
            section.locator("form[enctype] button[type=submit]").click()
        row = page.locator("#course-files table tbody tr", has_text=f"week1/{name}")
        assert row.count() == 1, page.content()
        assert "prof" in row.inner_text()
        stored = CourseFile.objects.get(course=course, path=f"week1/{name}")
        assert stored.sha256 == hashlib.sha256(data).hexdigest() and stored.size == len(data)
        blob = stack.workdir / "var" / "course-files" / "blobs" / stored.sha256[:2] / stored.sha256
        assert blob.read_bytes() == data  # on the portal's disk, not in the database
        assert AuditEvent.objects.filter(
            kind=AuditKind.COURSE_FILE_UPLOADED, data__path=f"week1/{name}"
        ).exists()
        for width, height in ((1280, 900), (390, 844)):  # a laptop, a phone
            page.set_viewport_size({"width": width, "height": height})
            violations = check_axe(page, f"course-files-{language}-listed-{width}")
            assert not violations, describe(violations)
            overflow = page.evaluate(
                "document.documentElement.scrollWidth - document.documentElement.clientWidth"
            )
            assert overflow <= 0, (width, overflow)

        # Delete: the question first (in the reader's language), then the file is gone.
        asked.clear()

        def answer(dialog) -> None:  # type: ignore[no-untyped-def]
            asked.append(dialog.message)
            dialog.accept()

        page.once("dialog", answer)
        with page.expect_navigation():
            row.locator("button").click()
        assert len(asked) == 1 and name in asked[0]
        assert not CourseFile.objects.filter(course=course).exists()
        assert page.locator("#course-files table").count() == 0
        assert AuditEvent.objects.filter(
            kind=AuditKind.COURSE_FILE_DELETED, data__path=f"week1/{name}"
        ).exists()
