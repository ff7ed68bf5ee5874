"""Told when away, by e-mail (issue 38): a desktop ready, a desktop about to be preempted
(with the minutes left and the deadline in the person's zone), and the time-limit warnings,
each only to the people who chose it on the account page, through a real SMTP server."""

from __future__ import annotations

from datetime import timedelta
from email.header import decode_header, make_header

import pytest
from django.utils import formats, timezone, translation

from people.preferences import save_preferences
from scheduling.choices import SessionState
from scheduling.engine.reasons import Code, Reason
from scheduling.models import Session
from scheduling.services.agent_sessions import do_report
from scheduling.services.cycle import do_scheduling_cycle
from scheduling.services.idle import do_idle_sweep
from scheduling.services.lifecycle import do_transition
from scheduling.services.lifecycle_notices import (
    EmailChoices,
    email_choices_of,
    set_email_choices,
)
from scheduling.services.sessions import check_submit, do_submit

pytestmark = [pytest.mark.django_db, pytest.mark.lifecycle]

ZONE = "Asia/Kathmandu"  # UTC+05:45: neither the server's zone nor UTC


def run_desktop(user, profile) -> Session:
    """A desktop placed by a cycle and reported RUNNING by its node's agent (the real path
    that makes it ready)."""
    session = do_submit(user, check_submit(user, profile.pk, "hobby", None))
    assert do_scheduling_cycle().placed >= 1
    session.refresh_from_db()
    do_report(session.node, session.pk, {"state": "RUNNING", "port": 32000, "audio_port": 32001})
    return Session.objects.get(pk=session.pk)


def preempt(session: Session, grace: timedelta) -> Session:
    """What the scheduler's preemption does (placement.apply_preemption): PREEMPTING with a
    deadline."""
    deadline = timezone.now() + grace
    return do_transition(
        session.pk,
        SessionState.PREEMPTING,
        actor="scheduler",
        reason=Reason(Code.PREEMPTED, {"for_tier": "thesis", "deadline": deadline.isoformat()}),
        only_from=frozenset({SessionState.RUNNING}),
        preempt_deadline=deadline,
    )


def mail_to(inbox, address: str) -> list[tuple[str, str]]:
    """(subject, body) of every message the server took for ``address``, in order."""
    found = []
    for message in inbox.messages:
        if message["X-RcptTo"] != address:
            continue
        subject = " ".join(str(make_header(decode_header(message["Subject"]))).split())
        body = message.get_payload(decode=True).decode(message.get_content_charset())
        found.append((subject, body))
    return found


def test_nobody_is_emailed_about_ready_or_preemption_without_choosing_it(owner):
    assert email_choices_of(owner) == EmailChoices()


def test_the_chosen_emails_arrive_and_the_unchosen_do_not(
    make_user, profile, pool, smtp_inbox, django_capture_on_commit_callbacks
):
    ada = make_user("ada", email="ada@example.edu")
    ben = make_user("ben", email="ben@example.edu")
    save_preferences(ada, time_zone=ZONE, language="en")
    # Ada wants to hear that her desktop is ready and that it is about to be preempted, not
    # the time-limit warnings; Ben chose nothing.
    set_email_choices(ada, EmailChoices(ready=True, preempting=True, warnings=False))

    with django_capture_on_commit_callbacks(execute=True):
        mine = run_desktop(ada, profile)
        his = run_desktop(ben, profile)
    ((subject, body),) = mail_to(smtp_inbox, "ada@example.edu")
    assert subject == f"Deskpool: your desktop {mine.pk} is ready"
    assert f"Your desktop {mine.pk} (AI painting) is ready" in body

    with django_capture_on_commit_callbacks(execute=True):
        preempted = preempt(mine, timedelta(minutes=5))
        preempt(his, timedelta(minutes=5))
    subject, body = mail_to(smtp_inbox, "ada@example.edu")[1]
    assert subject == f"Deskpool: your desktop {mine.pk} stops in 5 min for another request"
    deadline = preempted.preempt_deadline
    assert deadline is not None
    with translation.override("en"), timezone.override(ZONE):
        local = formats.date_format(timezone.localtime(deadline), "DATETIME_FORMAT")
    assert f"It stops in 5 min, at {local}: save your work now." in body, body

    # The time-limit warning: not chosen by Ada, so the sweep warns the pages only.
    with django_capture_on_commit_callbacks(execute=True):
        other = run_desktop(ada, profile)
    Session.objects.filter(pk=other.pk).update(
        started_at=timezone.now() - timedelta(minutes=profile.max_duration_minutes - 10)
    )
    with django_capture_on_commit_callbacks(execute=True):
        assert do_idle_sweep().limit_warnings == 1
    assert [subject for subject, _ in mail_to(smtp_inbox, "ada@example.edu")] == [
        f"Deskpool: your desktop {mine.pk} is ready",
        f"Deskpool: your desktop {mine.pk} stops in 5 min for another request",
        f"Deskpool: your desktop {other.pk} is ready",
    ]
    assert mail_to(smtp_inbox, "ben@example.edu") == []


def test_the_time_limit_warning_still_comes_to_whoever_chose_it(
    make_user, profile, pool, smtp_inbox, django_capture_on_commit_callbacks
):
    ada = make_user("ada", email="ada@example.edu")
    set_email_choices(ada, EmailChoices(warnings=True))
    session = run_desktop(ada, profile)
    Session.objects.filter(pk=session.pk).update(
        started_at=timezone.now() - timedelta(minutes=profile.max_duration_minutes - 10)
    )
    with django_capture_on_commit_callbacks(execute=True):
        assert do_idle_sweep().limit_warnings == 1
    assert [s for s, _ in mail_to(smtp_inbox, "ada@example.edu")] == [
        f"Deskpool: your desktop {session.pk} ends in 15 minutes"
    ]


def test_the_email_waits_for_the_commit(
    make_user, profile, pool, smtp_inbox, django_capture_on_commit_callbacks
):
    ada = make_user("ada", email="ada@example.edu")
    set_email_choices(ada, EmailChoices(ready=True, preempting=True))
    session = run_desktop(ada, profile)  # no commit hooks run: nothing sent
    assert smtp_inbox.messages == []
    with django_capture_on_commit_callbacks(execute=True) as hooks:
        preempt(session, timedelta(minutes=3))
    assert hooks, "the e-mail waits for the commit"
    assert [s for s, _ in mail_to(smtp_inbox, "ada@example.edu")] == [
        f"Deskpool: your desktop {session.pk} stops in 3 min for another request"
    ]


def test_the_emails_are_in_the_persons_language(
    make_user, profile, pool, smtp_inbox, django_capture_on_commit_callbacks
):
    """Passes once the zh-Hans catalogue has the new messages."""
    mei = make_user("mei", email="mei@example.edu")
    save_preferences(mei, language="zh-hans")
    set_email_choices(mei, EmailChoices(ready=True))
    with django_capture_on_commit_callbacks(execute=True):
        run_desktop(mei, profile)
    ((subject, body),) = mail_to(smtp_inbox, "mei@example.edu")
    assert any("\u4e00" <= ch <= "\u9fff" for ch in subject), subject
    paragraphs = body.replace("\r\n", "\n").split("\n\n")  # SMTP carries CRLF line ends
    assert any("\u4e00" <= ch <= "\u9fff" for ch in paragraphs[1]), body
