"""A person's choice of e-mails about their desktops (``LifecycleNotices``): when one is
ready, when one is about to be preempted, and the time-limit and idle warnings. The account
page sets it; :func:`on_entering` (called by ``lifecycle`` on every transition) sends the
first two, ``services.idle`` the warnings (``idle.wants_email``).

Nobody is e-mailed without choosing it: all three are off until the person turns them on
(the warnings were opt-in before the other two existed)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.contrib.auth.models import User
from django.utils import timezone

from ..choices import TERMINAL_STATES, SessionState
from ..models import LifecycleNotices, Session
from .email_notices import notify


@dataclass(frozen=True)
class EmailChoices:
    """Which e-mails a person wants (the pages and browser notifications tell regardless)."""

    ready: bool = False
    preempting: bool = False
    warnings: bool = False  # before the time limit, and before an idle suspension


def email_choices_of(user: User) -> EmailChoices:
    row = LifecycleNotices.objects.filter(user=user).first()
    if row is None:
        return EmailChoices()
    return EmailChoices(
        ready=row.email_ready, preempting=row.email_preempting, warnings=row.email_warnings
    )


def set_email_choices(user: User, choices: EmailChoices) -> None:
    LifecycleNotices.objects.update_or_create(
        user=user,
        defaults={
            "email_ready": choices.ready,
            "email_preempting": choices.preempting,
            "email_warnings": choices.warnings,
        },
    )


# The state entered → the choice that asks for its e-mail, and the e-mail's template.
_NOTICES = {
    SessionState.RUNNING: ("lifecycle_notices__email_ready", "desktop_ready"),
    SessionState.PREEMPTING: ("lifecycle_notices__email_preempting", "desktop_preempting"),
}


def on_entering(target: str, session_ids: Iterable[int], now: datetime | None = None) -> None:
    """E-mail the owners who chose it that their desktops ``session_ids`` just entered
    ``target`` (ready: RUNNING; about to be preempted: PREEMPTING, with the time left and the
    deadline in their zone). Called inside the transition's transaction: the e-mail goes
    after the commit (``email_notices.notify``), so a transition rolled back sends none."""
    notice = _NOTICES.get(SessionState(target)) if target in SessionState.values else None
    if notice is None:
        return
    choice, template = notice
    sessions = Session.objects.filter(
        pk__in=list(session_ids), user__email__gt="", **{f"user__{choice}": True}
    ).select_related("user", "profile")
    now = now or timezone.now()
    for session in sessions:
        context: dict[str, Any] = {"session": session}
        if session.preempt_deadline is not None:
            seconds = max(0.0, (session.preempt_deadline - now).total_seconds())
            context["minutes"] = max(1, math.ceil(seconds / 60))
            context["deadline"] = session.preempt_deadline
        notify(session.user, template, context)


def watched_sessions(user: User) -> dict[int, dict[str, str | None]]:
    """A person's sessions that may still become ready, be preempted or reach their time
    limit, as the pages' browser notifications start from them (``static/deskpool/away.js``):
    each one's state and time limit, as the live updates carry them."""
    watched: dict[int, dict[str, str | None]] = {}
    rows = Session.objects.filter(user=user).exclude(state__in=TERMINAL_STATES)
    for session in rows.select_related("profile"):
        ends_at = session.ends_at
        watched[session.pk] = {
            "state": session.state,
            "ends_at": ends_at.isoformat() if ends_at else None,
        }
    return watched
