"""Notices go out through a real SMTP server (aiosmtpd on 127.0.0.1, started by the test),
with Django's SMTP backend, in the recipient's language."""

from __future__ import annotations

from email.header import decode_header, make_header

import pytest

from people.models import Course, Member
from scheduling.services.quota_requests import check_answer, check_ask, do_answer, do_ask

pytestmark = pytest.mark.django_db


def test_a_quota_answer_reaches_the_student_over_smtp_in_their_language(
    smtp_inbox, make_user, django_capture_on_commit_callbacks
):
    student = make_user("mei", email="mei@example.edu")
    Member.objects.create(user=student, language="zh-hans")
    teacher = make_user("prof", email="prof@example.edu")
    course = Course.objects.create(code="cs101", title="Intro")
    course.students.add(student)
    course.instructors.add(teacher)
    with django_capture_on_commit_callbacks(execute=True):
        request = do_ask(student, check_ask(student, "cs101", 4, "Final project"))
    with django_capture_on_commit_callbacks(execute=True):
        do_answer(teacher, check_answer(teacher, request.pk, "grant", 3, "OK"))

    by_recipient = {m["X-RcptTo"]: m for m in smtp_inbox.messages}
    assert set(by_recipient) == {"prof@example.edu", "mei@example.edu"}
    to_student = by_recipient["mei@example.edu"]
    subject = str(make_header(decode_header(to_student["Subject"])))
    body = to_student.get_payload(decode=True).decode(to_student.get_content_charset())
    assert any("\u4e00" <= ch <= "\u9fff" for ch in subject + body), (subject, body)
    assert "cs101" in subject + body
