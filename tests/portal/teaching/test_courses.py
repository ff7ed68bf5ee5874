"""Course pages and API: who sees what (instructors, TAs by grant, admins), and the edits."""

from __future__ import annotations

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from guardian.shortcuts import assign_perm
from rest_framework.test import APIClient

from people.models import Course
from scheduling.choices import AuditKind
from scheduling.models import AuditEvent, CourseDesktop, Quota, Session, set_default_profile
from scheduling.services.teaching import teaching_courses

pytestmark = pytest.mark.django_db


@pytest.fixture
def teacher(make_user):
    return make_user("prof")


@pytest.fixture
def student(make_user):
    return make_user("stu")


@pytest.fixture
def course(teacher, student):
    course = Course.objects.create(code="cs101", title="Intro to GPUs")
    course.instructors.add(teacher)
    course.students.add(student)
    return course


@pytest.fixture
def other_course(make_user):
    other = make_user("other-prof")
    course = Course.objects.create(code="art200", title="Painting")
    course.instructors.add(other)
    return course


@pytest.fixture
def ta(make_user, course):
    ta = make_user("tina")
    assign_perm("portal.view_live_class", ta, course)
    return ta


def page(user, url):
    client = Client()
    client.force_login(user)
    return client.get(url)


def post(user, url, data, **extra):
    client = Client()
    client.force_login(user)
    return client.post(url, data, **extra)


def test_the_instructor_sees_roster_tas_settings_and_the_live_class(teacher, course, student):
    response = page(teacher, "/courses/cs101/")
    assert response.status_code == 200
    html = response.content.decode()
    for part in ('id="roster"', 'id="tas"', 'id="settings"', 'id="live-class"', "Start all"):
        assert part in html
    assert "stu" in html


def test_a_student_of_the_course_and_another_courses_instructor_get_404(
    course, student, other_course
):
    assert page(student, "/courses/cs101/").status_code == 404
    other = other_course.instructors.get()
    assert page(other, "/courses/cs101/").status_code == 404
    assert post(other, "/courses/cs101/start-all/", {}).status_code == 404


def test_a_ta_sees_only_what_they_were_granted(ta, course):
    html = page(ta, "/courses/cs101/").content.decode()
    assert 'id="live-class"' in html
    assert 'id="roster"' not in html and 'id="settings"' not in html
    assert "Start all" not in html
    assert post(ta, "/courses/cs101/start-all/", {}).status_code == 404

    assign_perm("portal.manage_class_desktops", ta, course)
    assert "Start all" in page(ta, "/courses/cs101/").content.decode()


def test_the_course_list_holds_taught_assisted_and_for_admins_all(
    teacher, ta, course, other_course, admin_user, student
):
    assert list(teaching_courses(teacher)) == [course]
    assert list(teaching_courses(ta)) == [course]
    assert set(teaching_courses(admin_user)) == {course, other_course}
    assert list(teaching_courses(student)) == []
    html = page(teacher, "/courses/").content.decode()
    assert "cs101" in html and "art200" not in html
    assert 'href="/courses/"' in html  # the nav link
    assert 'href="/courses/"' not in page(student, "/").content.decode()


def test_the_instructor_adds_a_ta_with_rights_and_removes_them(teacher, course, make_user):
    helper = make_user("hal")
    response = post(
        teacher,
        "/courses/cs101/tas/",
        {"username": "hal", "permissions": ["view_live_class", "manage_class_desktops"]},
    )
    assert response.status_code == 302
    assert helper.has_perm("portal.manage_class_desktops", course)
    assert Course.objects.visible_to(helper).filter(pk=course.pk).exists()
    assert page(helper, "/courses/cs101/").status_code == 200

    post(teacher, f"/courses/cs101/tas/{helper.pk}/remove/", {"confirmed": "1"})
    helper = type(helper).objects.get(pk=helper.pk)  # a fresh permission cache
    assert not helper.has_perm("portal.manage_class_desktops", course)
    assert page(helper, "/courses/cs101/").status_code == 404
    assert AuditEvent.objects.filter(kind=AuditKind.TA_GRANTS_CHANGED).count() == 2


def test_a_ta_form_without_rights_or_with_an_unknown_name_is_refused(teacher, course, make_user):
    make_user("hal")
    assert post(teacher, "/courses/cs101/tas/", {"username": "hal"}).status_code == 400
    response = post(
        teacher, "/courses/cs101/tas/", {"username": "nobody", "permissions": ["view_live_class"]}
    )
    assert response.status_code == 400
    assert "nobody" in response.content.decode()


def test_course_settings_are_validated_and_saved_with_an_audit(teacher, course, profile):
    bad = post(
        teacher,
        "/courses/cs101/settings/",
        {"default_profile": profile.pk, "max_sessions": "-1", "max_gpu_hours_week": "10"},
    )
    assert bad.status_code == 400
    assert not Quota.objects.filter(scope="course", key="cs101").exists()
    too_many = post(teacher, "/courses/cs101/settings/", {"max_sessions": "5000"})
    assert too_many.status_code == 400

    good = post(
        teacher,
        "/courses/cs101/settings/",
        {"default_profile": profile.pk, "max_sessions": "30", "max_gpu_hours_week": "12.5"},
    )
    assert good.status_code == 302
    assert CourseDesktop.objects.get(course=course).profile == profile
    quota = Quota.objects.get(scope="course", key="cs101")
    assert (quota.max_sessions, quota.max_gpu_hours_week) == (30, 12.5)
    assert AuditEvent.objects.filter(kind=AuditKind.COURSE_SETTINGS_CHANGED).exists()


def test_a_roster_upload_previews_then_imports(teacher, course):
    csv = b"username,name,e-mail\nnew1,New One,n1@example.edu\n"
    upload = SimpleUploadedFile("class.csv", csv, content_type="text/csv")
    form = {"file": upload, "action": "preview", "sync": "on"}
    preview = post(teacher, "/courses/cs101/roster/import/", form)
    assert preview.status_code == 200
    html = preview.content.decode()
    assert "new1" in html and "stu" in html  # one to add, one to remove
    assert list(course.students.values_list("username", flat=True)) == ["stu"]

    done = post(
        teacher,
        "/courses/cs101/roster/import/",
        {"csv_text": csv.decode(), "action": "import", "sync": "on"},
    )
    assert done.status_code == 302
    assert list(course.students.values_list("username", flat=True)) == ["new1"]


def test_a_bad_roster_upload_shows_the_rows_at_fault(teacher, course):
    upload = SimpleUploadedFile("c.csv", b"username,name,email\nok1,A,a@x.edu\nok2,B,nope\n")
    response = post(teacher, "/courses/cs101/roster/import/", {"file": upload, "action": "import"})
    assert response.status_code == 400
    html = response.content.decode()
    assert "row-errors" in html and "nope" in html
    assert course.students.count() == 1


def api(user):
    client = APIClient()
    client.force_authenticate(user)
    return client


def test_the_api_lists_and_shows_courses_per_role(teacher, ta, course, other_course, student):
    assert [c["code"] for c in api(teacher).get("/api/v1/courses/").json()] == ["cs101"]
    mine = api(ta).get("/api/v1/courses/cs101/").json()
    assert (mine["role"], mine["permissions"]) == ("ta", ["view_live_class"])
    assert api(student).get("/api/v1/courses/cs101/").status_code == 404
    assert api(ta).get("/api/v1/courses/cs101/roster/").status_code == 403
    assert api(ta).post("/api/v1/courses/cs101/start-all/").status_code == 403
    assert api(ta).get("/api/v1/courses/cs101/class/").status_code == 200


def test_the_api_imports_a_roster_or_answers_400_with_the_rows(teacher, course):
    client = api(teacher)
    bad = client.post(
        "/api/v1/courses/cs101/roster/",
        {"csv": "username;name;email\nx1;X;bad\n", "sync": True},
        format="json",
    )
    assert bad.status_code == 400
    [row] = bad.json()["rows"]
    assert (row["row"], row["column"]) == (2, "email") and "bad" in row["message"]
    assert course.students.count() == 1

    good = client.post(
        "/api/v1/courses/cs101/roster/",
        {"csv": "username;name;email\nx1;X;x1@example.edu\n", "sync": True},
        format="json",
    )
    assert good.status_code == 200
    assert good.json() == {"added": 1, "created": 1, "removed": 1, "unchanged": 0}
    usernames = [s["username"] for s in client.get("/api/v1/courses/cs101/roster/").json()]
    assert usernames == ["x1"]


def test_an_oversized_roster_file_is_refused_unread_and_imports_nothing(teacher, course):
    huge = SimpleUploadedFile(
        "class.csv", b"username,name,email\n" + b"x" * (3 * 1024 * 1024), "text/csv"
    )
    answer = api(teacher).post("/api/v1/courses/cs101/roster/", {"file": huge}, format="multipart")
    assert answer.status_code == 400
    [row] = answer.json()["rows"]
    assert row["column"] == "file" and "2 MB" in row["message"]
    assert course.students.count() == 1


def test_the_api_grants_and_removes_a_ta(teacher, course, make_user):
    make_user("hal")
    client = api(teacher)
    made = client.post(
        "/api/v1/courses/cs101/tas/",
        {"username": "hal", "permissions": ["answer_quota_requests"]},
        format="json",
    )
    assert made.status_code == 200
    assert client.get("/api/v1/courses/cs101/tas/").json() == [
        {"username": "hal", "permissions": ["answer_quota_requests"]}
    ]
    refused = client.post(
        "/api/v1/courses/cs101/tas/", {"username": "hal", "permissions": []}, format="json"
    )
    assert refused.status_code == 400 and "permissions" in refused.json()
    gone = client.delete("/api/v1/courses/cs101/tas/", {"username": "hal"}, format="json")
    assert gone.status_code == 204
    assert client.get("/api/v1/courses/cs101/tas/").json() == []


def test_the_api_starts_and_stops_the_class_and_lists_its_sessions(teacher, course, profile):
    client = api(teacher)
    refused = client.post("/api/v1/courses/cs101/start-all/")
    assert refused.status_code == 400 and "default_profile" in refused.json()

    set_default_profile(course, profile)
    started = client.post("/api/v1/courses/cs101/start-all/").json()
    assert (started["started"], started["skipped_at_limit"]) == (1, 0)
    [row] = client.get("/api/v1/courses/cs101/class/").json()
    assert (row["id"], row["username"], row["state"]) == (started["sessions"][0], "stu", "QUEUED")
    assert client.post("/api/v1/courses/cs101/stop-all/").json() == {"stopped": 1}
    assert client.get("/api/v1/courses/cs101/class/").json() == []


def test_a_ta_sees_the_courses_link_and_the_quota_requests_link_only_with_that_grant(ta, course):
    html = page(ta, "/courses/").content.decode()
    assert 'href="/courses/"' in html and "/courses/cs101/" in html
    assert "?course=cs101" not in page(ta, "/courses/cs101/").content.decode()
    assign_perm("portal.answer_quota_requests", ta, course)
    assert "?course=cs101" in page(ta, "/courses/cs101/").content.decode()


def test_the_settings_show_the_current_use_beside_each_limit(teacher, course, student, profile):
    Session.objects.create(
        user=student, profile=profile, purpose="coursework", course=course, state="RUNNING"
    )
    html = page(teacher, "/courses/cs101/").content.decode()
    assert "In use now: 1 desktop<" in html
