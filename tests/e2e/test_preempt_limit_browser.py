"""The two ends the clock brings, end to end in a real browser (issue 38): the preemption
countdown and the hard time-limit stop.

Everything is real but the desktops: daphne portal, Celery worker and beat (a scheduling
cycle every 2 s, which also runs the timers: ``timers.finish_grace_periods`` and
``timers.stop_overdue``), a node agent with the SIMULATED runtime and one MIG slice. The
desktop page's own banner and ended state are tested against real desktops in
test_limit_browser.py and test_desktop_viewer_ends.py; here the session page says it.
"""

from __future__ import annotations

import sys
from datetime import timedelta

import pytest
from django.utils import timezone

from scheduling.models import PoolPolicy, Session, Slice
from scheduling.presenters import render
from scheduling.services.nodes import do_create_join_token
from scheduling.services.sessions import check_submit, do_submit
from tests.conftest import give_thesis_grant

from ..integration.stack import wait_for, write_fleet
from .conftest import log_in, wait_js

pytestmark = [pytest.mark.browser, pytest.mark.integration, pytest.mark.lifecycle]

GRACE_MINUTES = 1  # the shortest grace the pool policy takes


@pytest.fixture
def stack_options() -> dict:
    return {
        "extra_env": {
            "DESKPOOL_SCHEDULER_BEAT_SECONDS": "2",
            "DESKPOOL_AGENT_HEARTBEAT_INTERVAL_S": "3",
        }
    }


def session_of(session_id: int) -> Session:
    return Session.objects.get(pk=session_id)


def start_beat_and_node(stack, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Beat (the periodic cycle, and so the timers) and a simulated node of one slice."""
    stack._spawn(
        "beat",
        [sys.executable, "-m", "celery", "-A", "portal", "beat", "--loglevel", "INFO"]
        + ["--schedule", str(tmp_path / "beat-schedule")],
    )
    stack.start_agent(
        do_create_join_token(stack.node, actor="test"),
        write_fleet(tmp_path / "fleet.yaml", stack.node, 1),
        runtime="simulated",
    )
    wait_for(
        lambda: Slice.objects.filter(
            gpu__node__hostname=stack.node, gpu__node__last_heartbeat__isnull=False
        ).exists(),
        60,
        "the simulated node's slice",
    )


def running_desktop(user, profile) -> Session:  # type: ignore[no-untyped-def]
    """A hobby desktop, placed by the real cycle and reported RUNNING by the agent."""
    session = do_submit(user, check_submit(user, profile.pk, "hobby", None))
    wait_for(lambda: session_of(session.pk).state == "RUNNING", 60, "RUNNING")
    return session_of(session.pk)


def state_on_page(page, state: str) -> None:
    wait_js(page, "(s) => document.getElementById('state')?.dataset.state === s", state, 120_000)


COUNTDOWN_S = """() => {
  const out = document.querySelector('#countdown-line [data-countdown]');
  if (!out || !out.textContent.includes(':')) return null;
  const [m, s] = out.textContent.split(':').map(Number);
  return m * 60 + s;
}"""


# Records each text #reason shows (a live update may swap the whole card, so the document
# is watched) in window.reasonsSeen.
REASONS_SEEN = """() => {
  window.reasonsSeen = [];
  const note = () => {
    const reason = document.getElementById('reason');
    const seen = window.reasonsSeen;
    if (reason && seen[seen.length - 1] !== reason.textContent) seen.push(reason.textContent);
  };
  note();
  new MutationObserver(note).observe(document.body, {
    subtree: true, childList: true, characterData: true,
  });
}"""


def test_a_preempted_desktop_counts_down_then_goes_back_to_the_queue_with_its_place(
    stack, owner, stranger, profile, tmp_path, new_page
) -> None:  # type: ignore[no-untyped-def]
    policy = PoolPolicy.current()
    policy.protected_minutes, policy.grace_minutes = 0, GRACE_MINUTES  # Ada's is preemptible
    policy.save()
    start_beat_and_node(stack, tmp_path)
    mine = running_desktop(owner, profile)
    page = new_page()
    log_in(page, "ada", "pw-ada")
    page.goto(f"/sessions/{mine.pk}/")
    assert page.get_attribute("#state", "data-state") == "RUNNING"

    # Ben's thesis request needs the only slice: the scheduler preempts Ada's hobby desktop.
    give_thesis_grant(stranger)
    do_submit(stranger, check_submit(stranger, profile.pk, "thesis", None))
    state_on_page(page, "PREEMPTING")
    preempting = session_of(mine.pk)
    assert preempting.preempt_deadline is not None
    assert page.is_visible("#countdown-line")
    # The countdown ticks down from the grace (at most a minute, as m:ss).
    first = wait_js(page, COUNTDOWN_S)
    assert 0 < first <= GRACE_MINUTES * 60, first
    later = wait_js(page, f"() => {{ const s = ({COUNTDOWN_S})(); return s < {first} && s; }}")
    assert 0 < later < first

    # The grace passes: the cycle's timer ends it; it waits again with its age (its place).
    # The page said so: the next cycle (every 2 s here) may already have put the queue's
    # reason in its place, so every reason the page shows from now on is recorded.
    page.evaluate(REASONS_SEEN)
    state_on_page(page, "PREEMPTED")
    back = session_of(mine.pk)
    assert back.created_at == mine.created_at
    assert back.preempt_deadline is None and back.node_id is None
    shown = [" ".join(text.split()) for text in page.evaluate("window.reasonsSeen")]
    assert render("requeued_preempted", {}) in shown, shown
    assert page.locator("#countdown-line").count() == 0
    # Ben's desktop took the slice; Ada is first in the queue when the next cycle looks.
    wait_for(lambda: session_of(back.pk).queue_position == 1, 60, "Ada's place in the queue")


def test_a_desktop_past_its_time_limit_is_stopped_and_the_page_says_why(
    stack, owner, profile, tmp_path, new_page
) -> None:  # type: ignore[no-untyped-def]
    start_beat_and_node(stack, tmp_path)
    mine = running_desktop(owner, profile)
    page = new_page()
    log_in(page, "ada", "pw-ada")
    page.goto(f"/sessions/{mine.pk}/")
    assert page.get_attribute("#state", "data-state") == "RUNNING"

    # Its limit passes (started that long ago): the cycle's timer stops it, the agent ends it.
    limit = profile.max_duration_minutes
    Session.objects.filter(pk=mine.pk).update(
        started_at=timezone.now() - timedelta(minutes=limit, seconds=1)
    )
    state_on_page(page, "ENDED")
    ended = session_of(mine.pk)
    assert (ended.state, ended.reason_code) == ("ENDED", "time_limit")
    said = f"stopping: the time limit of {limit} min is up"
    assert page.inner_text("#reason") == said
