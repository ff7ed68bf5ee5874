"""Notices go out through a real SMTP server (aiosmtpd on 127.0.0.1, started by the test),
with Django's SMTP backend, in the recipient's language."""

from __future__ import annotations

import email
import socket
from email.header import decode_header, make_header

import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.handlers import Message
from django.test import override_settings

from portal.models import Course, Member
from scheduling.services.quota_requests import check_answer, check_ask, do_answer, do_ask

pytestmark = pytest.mark.django_db


class Inbox(Message):
    """Keeps every message the server accepts."""

    def __init__(self) -> None:
        super().__init__()
        self.messages: list[email.message.Message] = []

    def handle_message(self, message: email.message.Message) -> None:
        self.messages.append(message)


@pytest.fixture
def smtp_server():
    inbox = Inbox()
    with socket.socket() as probe:  # a free port for the server
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    controller = Controller(inbox, hostname="127.0.0.1", port=port)
    controller.start()
    try:
        with override_settings(
            EMAIL_BACKEND="django.core.mail.backends.smtp.EmailBackend",
            EMAIL_HOST="127.0.0.1",
            EMAIL_PORT=port,
            EMAIL_USE_TLS=False,
            EMAIL_HOST_USER="",
            EMAIL_HOST_PASSWORD="",
        ):
            yield inbox
    finally:
        controller.stop()


def test_a_quota_answer_reaches_the_student_over_smtp_in_their_language(
    smtp_server, make_user, django_capture_on_commit_callbacks
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

    by_recipient = {m["X-RcptTo"]: m for m in smtp_server.messages}
    assert set(by_recipient) == {"prof@example.edu", "mei@example.edu"}
    to_student = by_recipient["mei@example.edu"]
    subject = str(make_header(decode_header(to_student["Subject"])))
    body = to_student.get_payload(decode=True).decode(to_student.get_content_charset())
    assert any("\u4e00" <= ch <= "\u9fff" for ch in subject + body), (subject, body)
    assert "cs101" in subject + body
