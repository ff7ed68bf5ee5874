"""The pages' browser notifications (``templates/portal/_away.html``, ``static/deskpool/away.js``):
``{% away_config %}`` writes what the script starts from, in the reader's language."""

from __future__ import annotations

from typing import Any

from django import template
from django.urls import reverse
from django.utils.html import json_script
from django.utils.safestring import SafeString
from django.utils.translation import gettext as _

from scheduling.services.idle import LIMIT_WARNINGS
from scheduling.services.lifecycle_notices import watched_sessions

register = template.Library()


def away_words() -> dict[str, str]:
    """What away.js says, on the page and in the notifications, in the active language."""
    return {
        "on": _(
            "Your browser will tell you when your desktop is ready, is about to be preempted "
            "or nears its time limit, while this page is open in the background."
        ),
        "blocked": _(
            "Your browser blocks notifications from Deskpool: allow them in its settings for "
            "this site to be told while you are away."
        ),
        "ready_title": _("Your desktop is ready"),
        "ready_body": _("Desktop #%(id)s (%(name)s) is running: open it."),
        "preempting_title": _("Your desktop is about to be preempted"),
        "preempting_body": _(
            "Desktop #%(id)s is needed for a request that comes first: it stops in "
            "%(minutes)s min. Save your work."
        ),
        "limit_title": _("Your desktop nears its time limit"),
        "limit_body": _("Desktop #%(id)s stops in %(minutes)s min: save your work."),
    }


@register.simple_tag(takes_context=True)
def away_config(context: dict[str, Any]) -> SafeString:
    """``#away-config``: the person's open sessions (the script tells of changes to them),
    the time-limit warning moments (``services.idle.LIMIT_WARNINGS``) and the words."""
    request = context.get("request")
    user = getattr(request, "user", None)
    sessions = watched_sessions(user) if user is not None and user.is_authenticated else {}
    config = {
        "sessions": sessions,
        "warn_minutes": sorted(LIMIT_WARNINGS, reverse=True),
        # A session's API address (its id for the 0): what a reconnected page catches up from.
        "session_api": reverse("session-detail", args=[0]),
        "words": away_words(),
    }
    return json_script(config, "away-config")
