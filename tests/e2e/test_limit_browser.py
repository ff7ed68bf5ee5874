"""The desktop page's banner in a real browser, at a phone's width (issue 15): the time limit
coming (time left, the end time in the person's zone), the idle warning with its suspension
time, Extend through the API (the new end time; the DB and the audit trail agree), Extend
refused while someone waits for that kind of slice (the reason, in plain words), and the
5-minute warning arriving live, louder.

Everything is real (daphne portal, Celery worker and beat, Docker agent, the XFCE desktop
through the portal's relay): a profile of 12 minutes (the 15-minute warning is due at once)
and 2-minute steps, an idle policy that warns after 20 s untouched (the CPU ignored) and
suspends only 10 minutes later, the idle sweep every 2 s. The node has one MIG slice, so
another person's request for the same profile waits.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.utils import timezone

from people.preferences import save_preferences
from scheduling.choices import AuditKind
from scheduling.models import AuditEvent, IdlePolicy, Session, SessionActivity
from scheduling.services.sessions import check_submit, do_submit
from tests.conftest import give_thesis_grant

from ..integration.stack import wait_for
from .axe import check_axe, describe
from .conftest import log_in, wait_js
from .test_browser import (  # noqa: F401 - desktop_profile is a fixture
    CANVAS_COLOURS,
    DESKTOP_IMAGE,
    OUTPUT,
    desktop_profile,
    open_desktop,
)
from .test_idle_browser import (  # noqa: F401 - stack_options is a fixture
    session_of,
    stack_options,
    start_sweep_and_desktop,
)

pytestmark = [
    pytest.mark.browser,
    pytest.mark.integration,
    pytest.mark.docker,
    pytest.mark.lifecycle,
]

ZONE = "Asia/Kathmandu"  # UTC+05:45: neither the browser's zone nor the server's
MAX_MINUTES, STEP_MINUTES = 12, 2
WARN_AFTER = timedelta(seconds=20)
SUSPEND_AFTER = timedelta(minutes=10)
PHONE = {"width": 390, "height": 844}
SUSPENDED = (
    "This desktop was suspended because nobody used it. Resume it to get back in the queue "
    "with your place kept."
)
WAITING = (
    "Someone is waiting for this kind of desktop, so yours cannot be given more time. "
    "Save your work before it ends."
)


@pytest.fixture
def limit_session(stack, owner, desktop_profile):  # noqa: F811
    """A 12-minute profile with 2-minute steps, a quick idle warning, and ada's thesis
    session (in her zone), queued before the browser starts."""
    desktop_profile.max_duration_minutes = MAX_MINUTES
    desktop_profile.extend_step_minutes = STEP_MINUTES
    desktop_profile.max_total_minutes = 60
    desktop_profile.save()
    IdlePolicy.objects.create(
        profile=desktop_profile,
        idle_after=timedelta(seconds=10),
        warn_after=WARN_AFTER,
        suspend_after=SUSPEND_AFTER,
        end_after=timedelta(hours=1),
        cpu_idle_pct=None,
    )
    save_preferences(owner, time_zone=ZONE)
    give_thesis_grant(owner)
    return do_submit(owner, check_submit(owner, desktop_profile.pk, "thesis", None))


def hhmm(moment: datetime) -> str:
    return moment.astimezone(ZoneInfo(ZONE)).strftime("%H:%M")


def banner(page) -> str:
    return page.inner_text("#banner-text")


def fits_the_phone(page) -> None:
    """The banner and its button lie within the phone's width, and nothing scrolls sideways."""
    for selector in ("#desktop-banner", "#banner-extend"):
        box = page.locator(selector).bounding_box()
        assert box is not None and box["x"] >= 0, selector
        assert box["x"] + box["width"] <= PHONE["width"] + 0.5, (selector, box)
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]


def test_the_desktop_page_warns_extends_and_says_why_not(
    stack, owner, stranger, limit_session, docker_engine, require_image, tmp_path, new_page
) -> None:  # type: ignore[no-untyped-def]
    require_image(DESKTOP_IMAGE)
    session_id = limit_session.pk
    start_sweep_and_desktop(stack, tmp_path, session_id)

    page = new_page()
    page.set_viewport_size(PHONE)
    log_in(page, "ada", "pw-ada")
    page.goto(f"/sessions/{session_id}/")
    open_desktop(page, session_id)
    wait_js(page, f"({CANVAS_COLOURS})() >= 8", timeout=30_000, polling=500)

    # The 15-minute warning, due at once: the time left and the end time in ada's zone.
    ends_at = session_of(session_id).ends_at
    assert ends_at is not None
    limit = f"time limit in less than 15 minutes, at {hhmm(ends_at)}: save your work."
    wait_js(page, "() => !document.getElementById('desktop-banner').hidden")
    assert limit in banner(page), banner(page)
    assert page.inner_text("#banner-left").startswith("Time left: ")
    assert page.get_attribute("#desktop-banner", "data-level") == "soon"
    assert page.is_visible("#banner-extend")
    # The sweep gave it too (its broadcast re-sends the session to the page).
    wait_for(
        lambda: SessionActivity.objects.filter(session_id=session_id, limit_warned=15).exists(),
        30,
        "the sweep's 15-minute warning",
    )

    # Untouched for 20 s: the idle warning, naming the suspension time (live, or at once if
    # the sweep warned before the page was open).
    wait_for(lambda: session_of(session_id).idle_state == "warned", 90, "the idle warning")
    idle_since = session_of(session_id).idle_since
    assert idle_since is not None
    suspends = hhmm(idle_since + SUSPEND_AFTER)
    idle_words = f"it will be suspended at {suspends} unless you use it."
    wait_js(
        page, "(w) => document.getElementById('banner-text').textContent.includes(w)", idle_words
    )
    assert limit in banner(page)
    fits_the_phone(page)
    page.screenshot(path=str(OUTPUT / "e2e-desktop-limit-phone.png"))

    # Extend: the banner shows the new end time; the DB and the audit trail agree.
    page.click("#banner-extend")
    wait_js(page, "() => document.getElementById('banner-answer').textContent !== ''")
    extended = session_of(session_id)
    assert extended.extended_minutes == STEP_MINUTES
    assert extended.ends_at == ends_at + timedelta(minutes=STEP_MINUTES)
    answer = page.inner_text("#banner-answer")
    assert answer == f"Extended: this desktop now ends at {hhmm(extended.ends_at)}.", answer
    audit = AuditEvent.objects.filter(session_id=session_id, kind=AuditKind.SESSION_EXTENDED)
    assert [(e.actor, e.data["minutes"]) for e in audit] == [("user:ada", STEP_MINUTES)]
    new_limit = f"at {hhmm(extended.ends_at)}: save your work."
    wait_js(
        page, "(w) => document.getElementById('banner-text').textContent.includes(w)", new_limit
    )

    # Ben asks for the same kind of desktop; the only slice is ada's thesis desktop (never
    # preempted), so he waits, and ada's Extend is refused with the reason. A thesis request:
    # a full pool still admits it.
    give_thesis_grant(stranger)
    waiting = do_submit(stranger, check_submit(stranger, extended.profile_id, "thesis", None))
    wait_for(lambda: session_of(waiting.pk).queue_position, 30, "ben's place in the queue")
    assert (session_of(waiting.pk).state, session_of(waiting.pk).blocked) == ("QUEUED", False)
    page.click("#banner-extend")
    wait_js(page, "(w) => document.getElementById('banner-answer').textContent === w", WAITING)
    assert session_of(session_id).extended_minutes == STEP_MINUTES
    assert audit.count() == 1
    assert page.is_visible("#banner-extend") and limit_in(page, extended.ends_at)

    # Five minutes before the limit the sweep warns again, live, and the banner gets louder.
    soon = timezone.now() + timedelta(minutes=4)
    moved = soon - timedelta(minutes=MAX_MINUTES + STEP_MINUTES)
    Session.objects.filter(pk=session_id).update(started_at=moved)
    wait_js(
        page,
        "() => document.getElementById('desktop-banner').dataset.level === 'urgent'",
        timeout=30_000,
    )
    shown = banner(page)
    assert f"time limit in less than 5 minutes, at {hhmm(session_of(session_id).ends_at)}" in shown
    assert idle_words in shown
    fits_the_phone(page)
    page.screenshot(path=str(OUTPUT / "e2e-desktop-limit-urgent-phone.png"))
    violations = check_axe(page, "student-desktop-limit-urgent-390")  # the loud banner's contrast
    assert not violations, describe(violations)

    # Still untouched, under a policy that now suspends at once: the banner says so, with the
    # way back (the session page's Resume); no Extend for a suspended desktop.
    IdlePolicy.objects.filter(profile_id=extended.profile_id).update(
        suspend_after=timedelta(seconds=1)
    )
    wait_for(lambda: session_of(session_id).state == "SUSPENDED", 30, "the suspension")
    wait_js(page, "() => !document.getElementById('banner-resume').hidden", timeout=30_000)
    assert banner(page) == SUSPENDED, banner(page)
    assert page.is_hidden("#banner-extend") and page.is_hidden("#banner-left")
    assert page.get_attribute("#banner-resume", "href") == f"/sessions/{session_id}/"
    status = "the desktop is suspended"
    wait_js(page, "(w) => document.getElementById('desktop-status').textContent === w", status)


def limit_in(page, ends_at: datetime) -> bool:
    return f"at {hhmm(ends_at)}: save your work." in banner(page)
