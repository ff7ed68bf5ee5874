"""Rosters from an instructor's spreadsheet: all rows or nothing, accounts for new people."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from rest_framework.test import APIClient

from people.models import Course, Member
from scheduling.choices import AuditKind
from scheduling.models import AuditEvent
from scheduling.services import roster
from scheduling.services.roster import (
    RosterErrors,
    check_add_student,
    check_roster,
    do_import_roster,
    do_remove_student,
)

pytestmark = pytest.mark.django_db

GOOD = (
    "username,name,e-mail\n"
    "s001,Alice Chen,alice@example.edu\n"
    "s002,Bo Li,bo@example.edu\n"
    "s003,Cai Wen,cai@example.edu\n"
)


@pytest.fixture
def teacher(make_user):
    return make_user("prof", first_name="Grace")


@pytest.fixture
def course(teacher):
    course = Course.objects.create(code="cs101", title="Intro")
    course.instructors.add(teacher)
    return course


def enrolled(course: Course) -> list[str]:
    return sorted(course.students.values_list("username", flat=True))


def test_a_good_file_enrols_everyone_and_creates_accounts_for_campus_sign_in(teacher, course):
    plan = check_roster(course, GOOD.encode())
    result = do_import_roster(teacher, course, plan)

    assert (result.added, result.created, result.removed) == (3, 3, 0)
    assert enrolled(course) == ["s001", "s002", "s003"]
    alice = User.objects.get(username="s001")
    assert not alice.has_usable_password()
    assert (alice.get_full_name(), alice.email) == ("Alice Chen", "alice@example.edu")
    assert alice.member.role == "student"
    event = AuditEvent.objects.get(kind=AuditKind.ROSTER_IMPORTED)
    assert (event.data["course"], event.data["added"], event.data["created"]) == ("cs101", 3, 3)


def test_bad_rows_are_listed_with_row_and_column_and_nothing_is_imported(teacher, course):
    bad = (
        "username,name,e-mail\n"
        "s001,Alice Chen,alice@example.edu\n"
        ",No Id,noid@example.edu\n"
        "s003,Cai Wen,not-an-address\n"
        "s001,Alice Again,alice2@example.edu\n"
        "bad name!,Dee,dee@example.edu\n"
    )
    with pytest.raises(RosterErrors) as caught:
        check_roster(course, bad.encode())

    found = {(e.row, e.column) for e in caught.value.errors}
    assert found == {(3, "username"), (4, "email"), (5, "username"), (6, "username")}
    assert all(e.message for e in caught.value.errors)
    assert enrolled(course) == []
    assert not User.objects.filter(username="s001").exists()
    assert not AuditEvent.objects.filter(kind=AuditKind.ROSTER_IMPORTED).exists()


def test_a_semicolon_file_with_a_bom_from_a_spreadsheet_is_read(teacher, course):
    text = (
        "\ufeffStudent ID;Name;E-Mail\r\n"
        "2024001;张三;zhang@example.edu\r\n"
        "2024002;李四;li@example.edu\r\n"
    )
    plan = check_roster(course, text.encode("utf-8"))
    do_import_roster(teacher, course, plan)

    zhang = User.objects.get(member__student_id="2024001")
    assert (zhang.username, zhang.first_name) == ("2024001", "张三")
    assert enrolled(course) == ["2024001", "2024002"]


def test_a_file_not_in_utf8_is_refused_with_what_to_do(course):
    with pytest.raises(RosterErrors) as caught:
        check_roster(course, "username,name\nx1,Jürgen\n".encode("latin-1"))
    assert "UTF-8" in caught.value.errors[0].message


def test_a_row_matches_an_existing_user_by_student_id(teacher, course, make_user):
    known = make_user("alice.c")
    Member.objects.create(user=known, student_id="2024001")
    plan = check_roster(course, b"student id,name,email\n2024001,Alice,alice@example.edu\n")

    result = do_import_roster(teacher, course, plan)

    assert (result.added, result.created) == (1, 0)
    assert enrolled(course) == ["alice.c"]
    assert known.has_usable_password()  # an existing account is left as it is


def test_sync_adds_the_new_removes_the_absent_and_counts_both(teacher, course, make_user):
    do_import_roster(teacher, course, check_roster(course, GOOD.encode()))
    again = "username,name,e-mail\ns002,Bo Li,bo@example.edu\ns004,Dan,dan@example.edu\n"

    plan = check_roster(course, again.encode(), sync=True)
    assert [r.username for r in plan.to_add] == ["s004"]
    assert [u.username for u in plan.to_remove] == ["s001", "s003"]
    result = do_import_roster(teacher, course, plan)

    assert (result.added, result.removed, result.unchanged) == (1, 2, 1)
    assert enrolled(course) == ["s002", "s004"]


def test_an_import_without_sync_removes_no_one(teacher, course):
    do_import_roster(teacher, course, check_roster(course, GOOD.encode()))
    plan = check_roster(course, b"username,name,e-mail\ns009,New,new@example.edu\n")
    do_import_roster(teacher, course, plan)
    assert enrolled(course) == ["s001", "s002", "s003", "s009"]


def test_one_person_is_added_and_removed_by_hand_and_audited(teacher, course, make_user):
    make_user("eve")
    do_import_roster(teacher, course, check_add_student(course, "eve"))
    assert enrolled(course) == ["eve"]
    do_remove_student(teacher, course, User.objects.get(username="eve"))
    assert enrolled(course) == []
    assert AuditEvent.objects.filter(kind=AuditKind.ROSTER_CHANGED).count() == 2


def test_a_header_without_an_identity_column_is_refused(course):
    with pytest.raises(RosterErrors) as caught:
        check_roster(course, b"name,email\nAlice,a@example.edu\n")
    assert caught.value.errors[0].row == 1


def test_first_and_last_name_columns_and_excel_unicode_text_are_read(teacher, course):
    text = "Student ID\tFirst name\tLast name\tEmail\r\n2024009\tAda\tLovelace\ta@example.edu\r\n"
    do_import_roster(teacher, course, check_roster(course, text.encode("utf-16")))
    ada = User.objects.get(member__student_id="2024009")
    assert (ada.first_name, ada.last_name, ada.email) == ("Ada", "Lovelace", "a@example.edu")


def test_a_forty_name_export_imports_in_one_go(teacher, course):
    lines = ["Username;Name;E-mail"] + [
        f"st{i:02d};Student {i};st{i:02d}@example.edu" for i in range(40)
    ]
    result = do_import_roster(teacher, course, check_roster(course, "\n".join(lines).encode()))
    assert (result.added, result.created) == (40, 40)
    assert course.students.count() == 40


# --- files the csv module cannot read, and files too big ----------------------------------

HUGE_CELL = "x" * (200 * 1024)  # over the csv module's 128 KB field limit


def test_a_cell_over_the_field_limit_is_a_row_error_saying_where_and_what_the_limit_is(course):
    text = f"username,name,e-mail\ns001,Alice Chen,a@example.edu\ns002,{HUGE_CELL},b@x.edu\n"
    with pytest.raises(RosterErrors) as refused:
        check_roster(course, text.encode())
    [error] = refused.value.errors
    assert (error.row, error.column) == (3, "file")
    assert "Row 3" in error.message and "131072 characters (128 KB)" in error.message
    assert not course.students.exists()


def test_a_quote_left_open_is_reported_on_the_row_where_it_opens(course):
    rows = [f"s{i:03d},Student {i},s{i:03d}@example.edu" for i in range(4500)]
    rows[1] = 's001,"Student 1,s001@example.edu'  # the quote runs on through the file
    text = "username,name,e-mail\n" + "\n".join(rows) + "\n"
    with pytest.raises(RosterErrors) as refused:
        check_roster(course, text.encode())
    [error] = refused.value.errors
    assert error.row == 3 and "quote" in error.message


def test_old_mac_line_ends_are_read_as_rows(teacher, course):
    plan = check_roster(course, b"username,name\rs001,Alice\rs002,Bo\r")
    assert [row.username for row in plan.to_add] == ["s001", "s002"]


def test_more_rows_than_an_import_takes_are_refused_with_what_to_do(course, monkeypatch):
    monkeypatch.setattr(roster, "MAX_ROWS", 3)
    five = "username\n" + "".join(f"s{i}\n" for i in range(5))
    with pytest.raises(RosterErrors) as refused:
        check_roster(course, five.encode())
    [error] = refused.value.errors
    assert error.column == "file" and "more than 3 students" in error.message
    assert "parts of at most 3 rows" in error.message
    check_roster(course, b"username\ns0\ns1\ns2\n")  # exactly the most: fine


def test_the_page_and_the_api_answer_a_cell_over_the_limit_with_the_row_not_a_500(teacher, course):
    text = f"username,name\ns001,Alice\ns002,{HUGE_CELL}\n".encode()
    page = Client()
    page.force_login(teacher)
    upload = SimpleUploadedFile("class.csv", text, content_type="text/csv")
    shown = page.post("/courses/cs101/roster/import/", {"file": upload, "action": "preview"})
    assert shown.status_code == 400
    html = shown.content.decode()
    assert "row-errors" in html and "Row 3 (line 3 of the file)" in html and "128 KB" in html

    api = APIClient()
    api.force_authenticate(teacher)
    upload = SimpleUploadedFile("class.csv", text, content_type="text/csv")
    answer = api.post("/api/v1/courses/cs101/roster/", {"file": upload}, format="multipart")
    assert answer.status_code == 400
    [row] = answer.json()["rows"]
    assert (row["row"], row["column"]) == (3, "file") and "128 KB" in row["message"]
    assert not course.students.exists()
