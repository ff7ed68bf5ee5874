"""The one rendering of a session: ``templates/portal/_session.html``.

Pages include it, and the live updates carry it, rendered for the listener (their language
and time zone are active around :func:`render_session`). Its input is the session payload
(``scheduling.events.session_payload``), the same dict the API returns and updates carry, so
a page, a live update and the API never disagree.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from scheduling.choices import OPENABLE_STATES, TERMINAL_STATES, WAITING_STATES, SessionState
from scheduling.services.idle import LIMIT_WARNINGS

FRAGMENT = "portal/_session.html"
# The two forms it takes: the session's own page (the ids its scripts and tests use) and
# an entry of a list (no ids, so several fit on one page).
DETAIL, ITEM = "detail", "item"
# From the first time-limit warning on (the sweep's broadcast then re-renders the fragment).
ENDS_SOON = timedelta(minutes=max(LIMIT_WARNINGS))


def fragment_context(payload: Mapping[str, Any], variant: str) -> dict[str, Any]:
    """What the template needs from a payload: times as datetimes, labels, links."""
    session_id = payload["id"]
    state = payload["state"]
    ends_at = parse_datetime(payload["ends_at"]) if payload.get("ends_at") else None
    idle = payload.get("idle") or {}
    suspends_at = parse_datetime(idle["suspends_at"]) if idle.get("suspends_at") else None
    return {
        "s": payload,
        "detail": variant == DETAIL,
        "state_label": SessionState(state).label if state in SessionState.values else state,
        "eta": parse_datetime(payload["eta"]) if payload.get("eta") else None,
        "ends_at": ends_at,
        "ends_soon": ends_at is not None and ends_at - timezone.now() <= ENDS_SOON,
        # Time left before the limit, whole minutes rounded up (session.js counts it down).
        **time_left(ends_at),
        "waiting": state in WAITING_STATES,
        "terminal": state in TERMINAL_STATES,
        "openable": state in OPENABLE_STATES and not payload["simulated"],
        "page_url": reverse("session-page", args=[session_id]),
        "desktop_url": reverse("desktop", args=[session_id]),
        "stop_url": reverse("session-page-stop", args=[session_id]),
        "cancel_url": reverse("session-cancel", args=[session_id]),
        "running": state == SessionState.RUNNING,
        "suspended": state == SessionState.SUSPENDED,
        "idle_state": idle.get("state", "active"),
        "suspends_at": suspends_at,  # warned: when it is suspended unless used
        "extend_url": reverse("session-page-extend", args=[session_id]),
        "resume_url": reverse("session-page-resume", args=[session_id]),
        # A failed start: "Try again" (the same request anew) or pick another profile.
        "failed": state == SessionState.FAILED,
        "retry_url": reverse("session-retry", args=[session_id]),
        "another_url": reverse("home") + "#request-title",
    }


def time_left(ends_at: datetime | None) -> dict[str, int]:
    """``left_h`` and ``left_m`` until ``ends_at`` (none when there is no limit)."""
    if ends_at is None:
        return {}
    minutes = max(0, math.ceil((ends_at - timezone.now()).total_seconds() / 60))
    return {"left_h": minutes // 60, "left_m": minutes % 60}


def render_session(payload: Mapping[str, Any], variant: str) -> str:
    """The fragment in the active language and time zone. Its forms carry an empty CSRF
    token when rendered outside a request; the page's script fills in its own."""
    return render_to_string(FRAGMENT, {"f": fragment_context(payload, variant)})


# What a live update carries of each form: ``html`` (the session's page), ``html_item`` (a
# list's entry).
KEYS = {DETAIL: "html", ITEM: "html_item"}
# The forms a page asks its live updates for (``/ws/updates/?fragment=``): the one it shows,
# or none (a page that shows no session card); without the parameter, both.
PAGE_FORMS: dict[str, tuple[str, ...]] = {DETAIL: (DETAIL,), ITEM: (ITEM,), "none": ()}
BOTH = (DETAIL, ITEM)


def render_forms(payload: Mapping[str, Any], forms: tuple[str, ...] = BOTH) -> dict[str, str]:
    """The forms asked for, keyed as a live update carries them."""
    return {KEYS[form]: render_session(payload, form) for form in forms}
