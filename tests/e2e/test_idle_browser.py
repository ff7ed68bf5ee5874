"""Idle culling in a real browser (issue 15): a person moving the mouse over noVNC keeps the
desktop; the same desktop left untouched, its viewer still connected, is warned and then
suspended (the container stops).

Everything is real (daphne portal, Celery worker and beat, Docker agent, the XFCE desktop
through the portal's relay) under short policy times set for the test: an ``IdlePolicy`` row
for the profile (idle 15 s, warned 25 s, suspended 10 s later; the CPU ignored, so only input
and the GPU count: the GPU has no NVML here, so no figure) and the idle sweep every 2 s.
"""

from __future__ import annotations

import sys
import time
from datetime import timedelta

import pytest

from scheduling.models import IdlePolicy, Session, SessionActivity
from scheduling.services.nodes import do_create_join_token
from scheduling.services.sessions import check_submit, do_submit
from tests.conftest import give_thesis_grant

from ..integration.stack import wait_for, write_fleet
from .conftest import log_in, wait_js
from .test_browser import CANVAS_COLOURS, DESKTOP_IMAGE, desktop_profile, open_desktop  # noqa: F401

pytestmark = [
    pytest.mark.browser,
    pytest.mark.integration,
    pytest.mark.docker,
    pytest.mark.lifecycle,
]

IDLE_AFTER, WARN_AFTER, SUSPEND_AFTER = 15, 25, 10  # seconds
# Moving the mouse for longer than it takes an untouched desktop to be suspended.
MOVING_S = WARN_AFTER + SUSPEND_AFTER + 10


@pytest.fixture
def stack_options() -> dict:
    return {
        "extra_env": {
            "DESKPOOL_IDLE_SWEEP_SECONDS": "2",
            "DESKPOOL_AGENT_HEARTBEAT_INTERVAL_S": "3",
        }
    }


@pytest.fixture
def idle_session(stack, owner, desktop_profile):  # noqa: F811
    """Short policy times for the profile, and ada's thesis session, queued (before the
    browser starts: the submit's broadcast is synchronous)."""
    IdlePolicy.objects.create(
        profile=desktop_profile,
        idle_after=timedelta(seconds=IDLE_AFTER),
        warn_after=timedelta(seconds=WARN_AFTER),
        suspend_after=timedelta(seconds=SUSPEND_AFTER),
        end_after=timedelta(hours=1),
        cpu_idle_pct=None,
    )
    give_thesis_grant(owner)
    return do_submit(owner, check_submit(owner, desktop_profile.pk, "thesis", None))


def session_of(session_id: int) -> Session:
    return Session.objects.get(pk=session_id)


def start_sweep_and_desktop(stack, tmp_path, session_id: int) -> None:  # type: ignore[no-untyped-def]
    """Beat (for the idle sweep) and an agent beside the stack; the session's real desktop
    RUNNING."""
    stack._spawn(
        "beat",
        [sys.executable, "-m", "celery", "-A", "portal", "beat", "--loglevel", "INFO"]
        + ["--schedule", str(tmp_path / "beat-schedule")],
    )
    stack.start_agent(
        do_create_join_token(stack.node, actor="test"),
        write_fleet(tmp_path / "fleet.yaml", stack.node, 1),
    )
    wait_for(lambda: session_of(session_id).state == "RUNNING", 120, "RUNNING")


def test_moving_the_mouse_keeps_the_desktop_and_an_untouched_one_is_warned_then_suspended(
    stack, idle_session, docker_engine, require_image, tmp_path, new_page
) -> None:  # type: ignore[no-untyped-def]
    require_image(DESKTOP_IMAGE)
    session_id = idle_session.pk
    start_sweep_and_desktop(stack, tmp_path, session_id)
    # The agent's usage reports make the session judgeable (no fresh sample: never idle).
    wait_for(
        lambda: SessionActivity.objects.filter(session_id=session_id).exclude(samples=[]).exists(),
        60,
        "a usage sample",
    )

    page = new_page()
    log_in(page, "ada", "pw-ada")
    page.goto(f"/sessions/{session_id}/")
    open_desktop(page, session_id)
    wait_js(page, f"({CANVAS_COLOURS})() >= 8", timeout=30_000, polling=500)
    box = page.locator("#screen canvas").bounding_box()
    assert box is not None

    # Moving the mouse over the desktop: it stays active well past the warning time.
    seen = set()
    step = 0
    end = time.monotonic() + MOVING_S
    while time.monotonic() < end:
        step += 1
        x = box["x"] + box["width"] * (0.2 + 0.6 * (step % 10) / 10)
        page.mouse.move(x, box["y"] + box["height"] / 2)
        seen.add(session_of(session_id).idle_state)
        page.wait_for_timeout(300)
    session = session_of(session_id)
    assert (session.state, seen) == ("RUNNING", {"active"}), seen
    assert SessionActivity.objects.get(session_id=session_id).input_events >= step // 2
    assert SessionActivity.objects.get(session_id=session_id).viewers == 1

    # Untouched, with the viewer still connected: warned, then suspended.
    wait_for(lambda: session_of(session_id).idle_state == "warned", 90, "the warning")
    assert session_of(session_id).state == "RUNNING"
    wait_for(lambda: session_of(session_id).state == "SUSPENDED", 90, "the suspension")
    session = session_of(session_id)
    assert (session.idle_state, session.reason_code) == ("suspended", "idle_suspended")
    wait_for(
        lambda: (
            not docker_engine.containers.list(filters={"label": f"deskpool.session={session_id}"})
        ),
        60,
        "the desktop's container to stop",
    )
    wait_js(page, "document.getElementById('desktop-status')?.textContent !== 'connected'")
