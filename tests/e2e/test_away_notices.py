"""Told when away, in a real browser (issue 38): the home page's button asks for the browser's
permission only when pressed, never on load; then, while the tab is hidden, a desktop made
ready through the service (lifecycle.do_transition, as the agent's report makes it) and one
preempted through the scheduler's own path (placement.apply_preemption) each bring a
notification with the person's words (en, zh-Hans) and, for the preemption, the minutes left;
so does the idle sweep's time-limit warning. While the tab is visible the page says it and no
notification comes. The page with the button passes axe-core (every impact).

The page's window.Notification is wrapped (an init script) to record what the page shows, and
document.visibilityState is the test's to set (window.__hidden)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from people.models import Member
from scheduling.choices import SessionState
from scheduling.engine import Preemption
from scheduling.engine.reasons import Code, Reason
from scheduling.models import Session
from scheduling.services.idle import do_idle_sweep
from scheduling.services.lifecycle import do_transition
from scheduling.services.placement import apply_preemption

from ..integration.stack import ROOT
from .axe import ALL_IMPACTS, check_axe, describe
from .conftest import log_in, wait_js

pytestmark = [pytest.mark.browser, pytest.mark.integration]

SHOTS = ROOT / "test-output" / "screenshots"
PHONE, LAPTOP = {"width": 390, "height": 844}, {"width": 1280, "height": 900}

RECORD_NOTIFICATIONS = """
(() => {
  const Real = window.Notification;
  if (!Real) return;
  window.__asked = 0;
  window.__notes = [];
  function Recording(title, options = {}) {
    window.__notes.push({ title, body: options.body || "", tag: options.tag || "" });
    return new Real(title, options);
  }
  Object.defineProperty(Recording, "permission", { get: () => Real.permission });
  Recording.requestPermission = (...args) => {
    window.__asked += 1;
    return Real.requestPermission(...args);
  };
  window.Notification = Recording;
  window.__hidden = false;
  Object.defineProperty(document, "visibilityState", {
    configurable: true,
    get: () => (window.__hidden ? "hidden" : "visible"),
  });
})();
"""

# What the notifications say, once the catalogue has them.
WORDS = {
    "en": {
        "ready_title": "Your desktop is ready",
        "ready_body": "Desktop #{id} (AI painting) is running: open it.",
        "preempting_title": "Your desktop is about to be preempted",
        "limit_title": "Your desktop nears its time limit",
        "limit_body": "Desktop #{id} stops in {minutes} min: save your work.",
        "preempting_body": (
            "Desktop #{id} is needed for a request that comes first: it stops in {minutes} "
            "min. Save your work."
        ),
    },
    "zh-hans": {
        "ready_title": "你的桌面已就绪",
        "ready_body": "桌面 #{id}（AI painting）已在运行：打开它吧。",
        "preempting_title": "你的桌面即将被抢占",
        "limit_title": "你的桌面快到时间上限了",
        "limit_body": "桌面 #{id} 将在 {minutes} 分钟后停止：请保存你的工作。",
        "preempting_body": (
            "桌面 #{id} 要让给优先的请求：它将在 {minutes} 分钟后停止。请保存你的工作。"
        ),
    },
}


def starting(user, profile) -> Session:
    return Session.objects.create(user=user, profile=profile, purpose="hobby", state="STARTING")


def make_ready(session: Session) -> None:
    do_transition(
        session.pk,
        SessionState.RUNNING,
        actor="test",
        only_from=frozenset({SessionState.STARTING}),
        started_at=timezone.now(),
    )


def notes(page) -> list[dict]:
    return page.evaluate("window.__notes")


@pytest.mark.parametrize("language", ["en", "zh-hans"])
def test_the_button_asks_once_pressed_and_a_hidden_tab_is_told_ready_and_preempted(
    stack, owner, stranger, profile, new_page, language
):
    Member.objects.update_or_create(user=owner, defaults={"language": language})
    seen_ready, hidden_ready = starting(owner, profile), starting(owner, profile)
    page = new_page()
    page.context.add_init_script(RECORD_NOTIFICATIONS)
    log_in(page, "ada", "pw-ada")

    # On load: the button, and no question asked.
    assert page.is_visible("#away-ask"), page.inner_html("#away")
    assert page.evaluate("window.__asked") == 0
    assert page.evaluate("Notification.permission") == "default"
    violations = check_axe(page, f"student-home-away-{language}", ALL_IMPACTS)
    assert not violations, describe(violations)
    page.set_viewport_size(PHONE)
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"student-{language}-home-away-390.png"))
    page.set_viewport_size(LAPTOP)

    # Pressed: the browser asks (the test's context answers yes), and the page says so.
    page.context.grant_permissions(["notifications"], origin=stack.url)
    page.click("#away-ask")
    on = page.evaluate("JSON.parse(document.getElementById('away-config').textContent).words.on")
    wait_js(page, "(w) => document.getElementById('away-said').textContent === w", on)
    assert page.evaluate("window.__asked") == 1
    assert page.is_hidden("#away-ask")
    # It follows the sessions from now on (its own live socket is open).
    wait_js(page, "() => document.getElementById('away').dataset.live === 'true'")

    # Visible: the card says it; no notification. Then hidden: the next one is told.
    make_ready(seen_ready)
    card = f'.session-card[data-session-id="{seen_ready.pk}"] [data-live="state"]'
    wait_js(page, f"document.querySelector({card!r})?.dataset.state === 'RUNNING'")
    page.evaluate("window.__hidden = true")
    make_ready(hidden_ready)
    wait_js(page, "() => window.__notes.length >= 1")
    words = WORDS[language]
    assert notes(page) == [
        {
            "title": words["ready_title"],
            "body": words["ready_body"].format(id=hidden_ready.pk),
            "tag": f"deskpool-{hidden_ready.pk}-ready",
        }
    ]

    # The scheduler preempts it for Ben's thesis request: five minutes of grace.
    thesis = Session.objects.create(user=stranger, profile=profile, purpose="thesis")
    deadline = timezone.now() + timedelta(minutes=5)
    reason = Reason(Code.PREEMPTED, {"for_tier": "thesis", "deadline": deadline})
    assert apply_preemption(Preemption(hidden_ready.pk, thesis.pk, deadline, reason))
    wait_js(page, "() => window.__notes.length >= 2")
    told = notes(page)[1]
    assert told["title"] == words["preempting_title"]
    # Minutes left, rounded up: 5 (4 once a minute has passed since the deadline was set).
    bodies = {words["preempting_body"].format(id=hidden_ready.pk, minutes=m) for m in (4, 5)}
    assert told["body"] in bodies, told

    # The other desktop nears its limit: the sweep's 15-minute warning, told with the minutes.
    Session.objects.filter(pk=seen_ready.pk).update(
        started_at=timezone.now() - timedelta(minutes=profile.max_duration_minutes - 10)
    )
    assert do_idle_sweep().limit_warnings == 1
    wait_js(page, "() => window.__notes.length >= 3")
    told = notes(page)[2]
    assert told["title"] == words["limit_title"]
    bodies = {words["limit_body"].format(id=seen_ready.pk, minutes=m) for m in (9, 10)}
    assert told["body"] in bodies, told
    assert len(notes(page)) == 3


def test_a_desktop_made_ready_while_the_socket_was_down_is_told_once_it_is_back(
    stack, owner, profile, new_page
):
    session = starting(owner, profile)
    page = new_page()
    page.context.add_init_script(RECORD_NOTIFICATIONS)
    page.context.grant_permissions(["notifications"], origin=stack.url)
    log_in(page, "ada", "pw-ada")
    # Allowed before: the page follows the sessions at once, without a press.
    wait_js(page, "() => document.getElementById('away').dataset.live === 'true'")
    assert page.evaluate("window.__asked") == 0 and page.is_hidden("#away-ask")
    page.evaluate("window.__hidden = true")

    # The portal goes away (its live socket with it); meanwhile the desktop becomes ready:
    # its live update reaches nobody.
    stack.stop("portal")
    wait_js(page, "() => document.getElementById('away').dataset.live !== 'true'")
    make_ready(session)
    stack.start_portal()
    wait_js(page, "() => window.__notes.length >= 1", timeout=30_000)
    assert [note["tag"] for note in notes(page)] == [f"deskpool-{session.pk}-ready"]
