"""The hard time-limit stop on the database: the cycle's timer stops a desktop past its limit,
and once its agent reports it ended the session still says why (the time limit), for the
pages and the API."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from scheduling.models import Session
from scheduling.presenters import render
from scheduling.services.agent_sessions import do_report
from scheduling.services.sessions import do_stop
from scheduling.services.timers import stop_overdue
from tests.scheduling.test_away_emails import run_desktop

pytestmark = [pytest.mark.django_db, pytest.mark.lifecycle]


def test_a_desktop_stopped_at_its_time_limit_ends_saying_so(owner, profile, pool):
    session = run_desktop(owner, profile)
    limit = profile.max_duration_minutes
    Session.objects.filter(pk=session.pk).update(
        started_at=timezone.now() - timedelta(minutes=limit, seconds=1)
    )
    assert stop_overdue(timezone.now()) == 1
    stopping = Session.objects.get(pk=session.pk)
    assert (stopping.state, stopping.reason_code) == ("STOPPING", "time_limit")

    do_report(stopping.node, session.pk, {"state": "ENDED"})
    ended = Session.objects.get(pk=session.pk)
    assert ended.state == "ENDED"
    assert render(ended.reason_code, ended.reason_params) == (
        f"stopping: the time limit of {limit} min is up"
    )


def test_a_desktop_its_owner_stopped_ends_without_that_reason(owner, profile, pool):
    session = run_desktop(owner, profile)
    stopping = do_stop(owner, session)
    if stopping.state == "STOPPING":
        do_report(stopping.node, session.pk, {"state": "ENDED"})
    ended = Session.objects.get(pk=session.pk)
    assert ended.state == "ENDED" and ended.reason_code != "time_limit"
