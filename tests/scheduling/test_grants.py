"""Thesis grants and eligibility: who may ask for thesis and coursework, and what happens to
queued requests when the right to them ends (revoked, expired, unenrolled).

Real PostgreSQL; the pool is the conftest's ten slices.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core import mail
from django.utils import timezone

from people.models import Course, Member, Role, ThesisGrant
from scheduling.choices import AuditKind, Purpose, SessionState
from scheduling.engine.reasons import Code
from scheduling.models import AuditEvent, Session
from scheduling.services import Conflict, NotFound, ServiceError
from scheduling.services.cycle import do_scheduling_cycle
from scheduling.services.eligibility import (
    Forbidden,
    active_thesis_grant,
    demote_ineligible,
    eligible_courses,
    eligible_purposes,
)
from scheduling.services.grants import check_grant, check_revoke, do_grant, do_revoke
from scheduling.services.sessions import check_submit, do_submit

pytestmark = pytest.mark.django_db


@pytest.fixture
def advisor(make_user):
    user = make_user("prof", email="prof@example.edu")
    Member.objects.create(user=user, role=Role.FACULTY)
    return user


@pytest.fixture
def student(make_user):
    user = make_user("lin", email="lin@example.edu")
    Member.objects.create(user=user, role=Role.STUDENT, language="zh-hans")
    return user


def grant(advisor, student, days: int = 30) -> ThesisGrant:
    until = timezone.localdate() + timedelta(days=days)
    return do_grant(advisor, check_grant(advisor, student.username, until, "chapter 3"))


def submit(user, profile, purpose: str, course: str | None = None) -> Session:
    return do_submit(user, check_submit(user, profile.pk, purpose, course))


def test_a_faculty_member_grants_thesis_status_and_it_is_audited(advisor, student):
    given = grant(advisor, student)
    assert active_thesis_grant(student) == given
    assert eligible_purposes(student) == [Purpose.THESIS, Purpose.HOBBY]
    event = AuditEvent.objects.get(kind=AuditKind.THESIS_GRANTED)
    assert event.actor == "user:prof" and event.data["student"] == "lin"


def test_students_and_strangers_may_not_grant(student, stranger):
    until = timezone.localdate() + timedelta(days=3)
    for who in (student, stranger):
        with pytest.raises(Forbidden):
            check_grant(who, "ada", until)
    assert not ThesisGrant.objects.exists()


def test_a_grant_needs_a_known_student_and_a_future_last_day(advisor, student):
    with pytest.raises(ServiceError) as unknown:
        check_grant(advisor, "nobody", timezone.localdate())
    assert unknown.value.field == "student"
    with pytest.raises(ServiceError) as past:
        check_grant(advisor, "lin", timezone.localdate() - timedelta(days=1))
    assert past.value.field == "until"


def test_thesis_without_a_grant_is_refused_at_submit(student, profile, pool):
    with pytest.raises(ServiceError) as refused:
        check_submit(student, profile.pk, "thesis", None)
    assert refused.value.field == "purpose" and "thesis grant" in refused.value.message
    assert not Session.objects.exists()


def test_revoking_demotes_queued_thesis_requests_and_tells_the_student_in_their_language(
    advisor, student, profile, pool, django_capture_on_commit_callbacks
):
    given = grant(advisor, student)
    queued = submit(student, profile, "thesis")
    with django_capture_on_commit_callbacks(execute=True):
        do_revoke(advisor, check_revoke(advisor, given.pk))
    queued.refresh_from_db()
    assert queued.purpose == Purpose.HOBBY and queued.state == SessionState.QUEUED
    assert queued.reason_code == Code.THESIS_GRANT_ENDED
    kinds = set(AuditEvent.objects.values_list("kind", flat=True))
    assert {AuditKind.THESIS_REVOKED, AuditKind.THESIS_ENDED, AuditKind.SESSION_DEMOTED} <= kinds
    given.refresh_from_db()
    assert given.revoked_by == advisor and given.closed_at is not None
    [letter] = mail.outbox
    assert letter.to == ["lin@example.edu"]
    assert "兴趣项目" in letter.body  # "Hobby" in Chinese: rendered in Member.language
    with pytest.raises(Conflict):
        check_revoke(advisor, given.pk)


def test_only_the_grantor_or_an_admin_revokes(advisor, student, make_user, admin_user):
    given = grant(advisor, student)
    other = make_user("other-prof")
    Member.objects.create(user=other, role=Role.FACULTY)
    with pytest.raises(NotFound):
        check_revoke(other, given.pk)  # not theirs to see
    with pytest.raises(Forbidden):
        check_revoke(student, given.pk)  # the student sees it but may not revoke it
    assert check_revoke(admin_user, given.pk) == given


def test_an_expired_grant_is_closed_once_by_the_cycle_and_its_requests_demoted(
    advisor, student, profile, pool, django_capture_on_commit_callbacks
):
    given = grant(advisor, student, days=0)
    queued = submit(student, profile, "thesis")
    ThesisGrant.objects.filter(pk=given.pk).update(until=timezone.localdate() - timedelta(days=1))
    with django_capture_on_commit_callbacks(execute=True):
        assert demote_ineligible(timezone.now()) == 1
        assert demote_ineligible(timezone.now()) == 0
    queued.refresh_from_db()
    assert (queued.purpose, queued.reason_code) == (Purpose.HOBBY, Code.THESIS_GRANT_ENDED)
    assert AuditEvent.objects.filter(kind=AuditKind.THESIS_ENDED).count() == 1
    assert len(mail.outbox) == 1


def test_another_grant_in_force_keeps_thesis_requests(advisor, student, profile, pool):
    first = grant(advisor, student)
    grant(advisor, student, days=60)
    queued = submit(student, profile, "thesis")
    do_revoke(advisor, check_revoke(advisor, first.pk))
    queued.refresh_from_db()
    assert queued.purpose == Purpose.THESIS


def test_the_cycle_never_places_a_thesis_request_without_a_grant(owner, profile, pool):
    # Made behind the submit check's back (an old row, or a grant revoked in between).
    ineligible = Session.objects.create(user=owner, profile=profile, purpose=Purpose.THESIS)
    do_scheduling_cycle()
    ineligible.refresh_from_db()
    assert ineligible.purpose == Purpose.HOBBY
    demoted = AuditEvent.objects.get(kind=AuditKind.SESSION_DEMOTED, session=ineligible)
    assert demoted.data["from"] == Purpose.THESIS
    # Placed, if at all, only as a hobby request: the demotion came first.
    placed = AuditEvent.objects.filter(kind=AuditKind.SESSION_PLACED, session=ineligible)
    assert all(p.pk > demoted.pk for p in placed)


def test_unenrolled_coursework_is_demoted_with_the_course_named(owner, profile, pool):
    course = Course.objects.create(code="cs101", title="Intro")
    course.students.add(owner)
    assert list(eligible_courses(owner)) == [course]
    assert eligible_purposes(owner) == [Purpose.COURSEWORK, Purpose.HOBBY]
    queued = submit(owner, profile, "coursework", "cs101")
    course.students.remove(owner)
    assert demote_ineligible(timezone.now()) == 1
    queued.refresh_from_db()
    assert queued.purpose == Purpose.HOBBY and queued.course is None
    assert (queued.reason_code, queued.reason_params) == (
        Code.ENROLMENT_ENDED,
        {"course": "cs101"},
    )


def test_enrolled_coursework_and_granted_thesis_stay(advisor, student, profile, pool):
    course = Course.objects.create(code="cs101", title="Intro")
    course.students.add(student)
    grant(advisor, student)
    kept = [submit(student, profile, "coursework", "cs101"), submit(student, profile, "thesis")]
    assert demote_ineligible(timezone.now()) == 0
    assert [Session.objects.get(pk=s.pk).purpose for s in kept] == ["coursework", "thesis"]


def test_thesis_status_goes_to_students_only(advisor, make_user):
    colleague = make_user("wang")
    Member.objects.create(user=colleague, role=Role.FACULTY)
    admin = make_user("root", is_staff=True)
    until = timezone.localdate() + timedelta(days=3)
    for who in (colleague, admin):
        with pytest.raises(ServiceError) as refused:
            check_grant(advisor, who.username, until)
        assert refused.value.field == "student" and "students only" in refused.value.message
    newcomer = make_user("zhao")  # no member row yet: a student by default
    assert check_grant(advisor, newcomer.username, until).student == newcomer
    assert not ThesisGrant.objects.exists()
