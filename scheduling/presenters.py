"""Reasons rendered for a person: in the active language (gettext) and time zone.

The one place that turns a :class:`~scheduling.engine.reasons.Reason` code and its parameters
into a sentence. Stored parameters are JSON: times arrive as ISO 8601 strings and are read
back as aware datetimes. Rendering never fails on odd stored data: a missing parameter shows
as a question mark and an unknown code as the code itself.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.utils import timezone
from django.utils.formats import date_format
from django.utils.text import capfirst
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from .engine.reasons import Code, Reason

TIER_LABELS = {
    "booked": gettext_lazy("booked class"),
    "thesis": gettext_lazy("thesis"),
    "coursework": gettext_lazy("coursework"),
    "hobby": gettext_lazy("hobby"),
}
SOON = timedelta(seconds=30)


def pool_closed_words() -> str:
    """Why nothing starts while no node takes new desktops (``Code.POOL_CLOSED``)."""
    return _(
        "The pool is closed for maintenance: no node takes new desktops. You keep your place; "
        "it starts when a node opens."
    )


def stored(reason: Reason) -> dict[str, Any]:
    """The model fields for a reason: ``reason_code`` and JSON ``reason_params``."""
    encoder = DjangoJSONEncoder()
    params = {
        name: encoder.default(value) if isinstance(value, datetime) else value
        for name, value in reason.params.items()
    }
    return {"reason_code": str(reason.code), "reason_params": params}


def _time(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            return None
        return parsed if parsed.tzinfo else None
    return None


def _clock(value: Any) -> str:
    """A time in the reader's zone: HH:MM today, with the date on other days."""
    moment = _time(value)
    if moment is None:
        return "?"
    local = timezone.localtime(moment)
    if local.date() == timezone.localtime().date():
        return local.strftime("%H:%M")
    return date_format(local, "SHORT_DATETIME_FORMAT")  # per language (portal/server/formats)


def _percent(value: Any) -> str:
    try:
        return f"{float(value):.0%}"
    except (TypeError, ValueError):
        return "?"


def _number(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return "?"
    return f"{value:g}"


def _tenths(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return "?"
    return f"{value:.1f}"


def _tier(value: Any) -> str:
    label = TIER_LABELS.get(str(value))
    return str(label) if label is not None else str(value)


def _whose(p: Mapping[str, Any]) -> str:
    scope, key = p.get("scope"), p.get("key", "?")
    if scope == "course":
        return _("course %(key)s's") % {"key": key}
    if scope == "department":
        return _("department %(key)s's") % {"key": key}
    return _("your")


def _waiting(p: Mapping[str, Any], why: str) -> str:
    ahead, higher = p.get("ahead", 0), p.get("higher", 0)
    tier = _tier(p.get("tier", "?"))
    if ahead:
        text = why + _(": %(ahead)s ahead of you in %(tier)s") % {"ahead": ahead, "tier": tier}
    else:
        text = why + _(": next in %(tier)s") % {"tier": tier}
    if higher:
        text += _(", %(higher)s in higher tiers") % {"higher": higher}
    eta = _time(p.get("eta"))
    if eta is not None:
        if eta <= timezone.now() + SOON:
            text += _("; estimated start: any moment")
        else:
            text += _("; estimated start %(time)s") % {"time": _clock(eta)}
    return text


def _quota(code: Code, p: Mapping[str, Any]) -> str:
    """The quota sentence without its "Held by a quota:" lead (submit refusals use it bare)."""
    whose = _whose(p)
    if code == Code.QUOTA_SLICE_MEMORY:
        return _(
            "%(whose)s largest slice is %(limit)s MB of GPU memory; this profile needs %(need)s MB"
        ) % {"whose": whose, "limit": p.get("limit_mb", "?"), "need": p.get("need_mb", "?")}
    if code == Code.QUOTA_GPU_HOURS:
        return _("%(whose)s quota of %(limit)s GPU-hours this week is used (%(used)s used)") % {
            "whose": whose,
            "limit": _number(p.get("limit")),
            "used": _tenths(p.get("used")),
        }
    return _(
        "%(whose)s quota of %(limit)s concurrent desktops is in use; one must end before this "
        "one starts"
    ) % {"whose": whose, "limit": p.get("limit", "?")}


QUOTA_CODES = frozenset({Code.QUOTA_SLICE_MEMORY, Code.QUOTA_GPU_HOURS, Code.QUOTA_SESSIONS})


def _no_fit(p: Mapping[str, Any]) -> str:
    short = p.get("short") or ()
    if "cpus" in short:
        return _(
            "no node in the pool has %(cpus)s CPUs for this profile (the largest has "
            "%(most)s); ask an admin, or pick another profile"
        ) % {"cpus": _number(p.get("cpus")), "most": _number(p.get("most_cpus"))}
    if "ram" in short:
        return _(
            "no node in the pool has %(ram)s MB of memory for this profile (the largest has "
            "%(most)s MB); ask an admin, or pick another profile"
        ) % {"ram": p.get("ram_mb", "?"), "most": p.get("most_ram_mb", "?")}
    if not p.get("gpu_count"):
        return _(
            "no node in the pool has both %(cpus)s CPUs and %(ram)s MB of memory for this "
            "profile; ask an admin, or pick another profile"
        ) % {"cpus": _number(p.get("cpus")), "ram": p.get("ram_mb", "?")}
    kinds = "/".join(str(k) for k in p.get("kinds") or ())
    needs = f"{p.get('gpu_count', '?')} x {p.get('memory_mb', '?')} MB ({kinds})"
    if p.get("models"):
        needs += _(" on %(models)s") % {"models": "/".join(str(m) for m in p["models"])}
    return _(
        "no healthy node in the pool can run this profile (it needs %(needs)s); ask an admin, "
        "or pick another profile"
    ) % {"needs": needs}


def _start_failed(p: Mapping[str, Any]) -> str:
    """A failed start's cause (a nodeagent.failures code) in plain words, with what to do."""
    cause = {
        "not_enough_cpus": _("its node has fewer CPUs than this profile needs"),
        "not_enough_memory": _("its node has too little memory for this profile"),
        "out_of_memory": _("the desktop ran out of memory while starting"),
        "image_missing": _("the desktop image is missing on its node"),
        "device_missing": _("the GPU it was given is not available on its node"),
        "timeout": _("the desktop did not answer in time"),
    }.get(str(p.get("cause", "")), _("its node could not start it"))
    return _(
        "Your desktop could not start: %(cause)s. The admins have been told. Try again, or "
        "pick another profile."
    ) % {"cause": cause}


SENTENCES: dict[Code, Callable[[Mapping[str, Any]], str]] = {
    Code.WAITING: lambda p: _waiting(p, _("waiting for a free slice")),
    Code.WAITING_HOT: lambda p: _waiting(
        p,
        _(
            "waiting for a free slice; the free GPUs that fit are at or above %(limit)s °C and "
            "get no new work until they cool"
        )
        % {"limit": _number(p.get("limit_c"))},
    ),
    Code.WAITING_HELD: lambda p: _waiting(
        p, _("waiting for a free slice; what is free is held for a class booking")
    ),
    Code.WAITING_VICTIMS: lambda p: (
        _("starting when %(count)s desktop(s) preempted for it stop (grace ends %(deadline)s)")
        % {"count": p.get("count", "?"), "deadline": _clock(p.get("deadline"))}
    ),
    Code.WAITING_PREEMPTING: lambda p: (
        _("starting when %(count)s desktop(s) of lower priority stop (grace ends %(deadline)s)")
        % {"count": p.get("count", "?"), "deadline": _clock(p.get("deadline"))}
    ),
    Code.NO_FIT: _no_fit,
    Code.POOL_CLOSED: lambda p: pool_closed_words(),
    Code.POOL_BLOCK: lambda p: (
        _(
            "The pool is %(busy)s busy, at or above its block level of %(limit)s: no new "
            "hobby desktops until it is below. Try again later."
        )
        % {"busy": _percent(p.get("utilisation")), "limit": _percent(p.get("limit"))}
    ),
    Code.PREEMPTED: lambda p: (
        _(
            "preempted for a %(tier)s request: your desktop stops at %(deadline)s (grace ends "
            "then) and goes back to the queue, keeping its place; save your work (your home "
            "folder is kept)"
        )
        % {"tier": _tier(p.get("for_tier", "?")), "deadline": _clock(p.get("deadline"))}
    ),
    Code.POOL_OK: lambda p: _("pool at %(busy)s") % {"busy": _percent(p.get("utilisation"))},
    Code.POOL_WARN: lambda p: (
        _("pool at %(busy)s: above the warning threshold (%(limit)s)")
        % {"busy": _percent(p.get("utilisation")), "limit": _percent(p.get("limit"))}
    ),
    Code.POOL_BLOCKED: lambda p: (
        _("pool at %(busy)s: above the block threshold (%(limit)s); new hobby requests are refused")
        % {"busy": _percent(p.get("utilisation")), "limit": _percent(p.get("limit"))}
    ),
    Code.BOOKING_SHORT: lambda p: (
        _(
            "booking %(booking)s (%(course)s): %(held)s of %(need)s seats held; the rest do not "
            "fit the pool now"
        )
        % {k: p.get(k, "?") for k in ("booking", "course", "held", "need")}
    ),
    Code.PLACED_HOME: lambda p: (
        _(
            "placed on node %(node)s, which keeps your home folder; waiting for the node to "
            "start the desktop"
        )
        % {"node": p.get("node", "?")}
    ),
    Code.PLACED_AWAY: lambda p: (
        _(
            "placed on node %(node)s: node %(home)s, which keeps your home folder, cannot take "
            "it now, so this desktop starts with a different home folder; waiting for the node "
            "to start the desktop"
        )
        % {"node": p.get("node", "?"), "home": p.get("home", "?")}
    ),
    Code.SUBMITTED: lambda p: _("waiting for the scheduler"),
    Code.PLACED: lambda p: _("placed; waiting for the node to start the desktop"),
    Code.PLACED_WARM: lambda p: _(
        "placed on a desktop started ahead for your class; opening it with your home folder"
    ),
    Code.PLACED_SEAT: lambda p: _(
        "placed on a seat of your class; waiting for the node to start it"
    ),
    Code.STARTING: lambda p: _("starting the desktop"),
    Code.STOPPING: lambda p: _("stopping"),
    Code.STOPPED: lambda p: _("stopped"),
    Code.TIME_LIMIT: lambda p: (
        _("stopping: the time limit of %(minutes)s min is up") % {"minutes": p.get("minutes", "?")}
    ),
    Code.REQUEUED_PREEMPTED: lambda p: _(
        "preempted: back in the queue with its place kept; your home is kept"
    ),
    Code.NODE_SILENT_REQUEUED: lambda p: (
        _(
            "node %(node)s stopped answering at %(since)s; your session was requeued and keeps its "
            "place by age"
        )
        % {"node": p.get("node", "?"), "since": _clock(p.get("since"))}
    ),
    Code.GPU_CORDONED: lambda p: (
        _(
            "GPU %(gpu)s of node %(node)s reported a fault and takes no new desktops; save your "
            "work: this desktop may have to stop"
        )
        % {"gpu": p.get("gpu", "?"), "node": p.get("node", "?")}
    ),
    Code.GPU_DRAINED_REQUEUED: lambda p: (
        _(
            "GPU %(gpu)s of node %(node)s is out of service; your session was requeued and keeps "
            "its place by age"
        )
        % {"gpu": p.get("gpu", "?"), "node": p.get("node", "?")}
    ),
    Code.NODE_SILENT_ENDED: lambda p: (
        _("node %(node)s stopped answering at %(since)s; your session was ended")
        % {"node": p.get("node", "?"), "since": _clock(p.get("since"))}
    ),
    Code.NODE_DRAINED_REQUEUED: lambda p: (
        _(
            "node %(node)s is being emptied for maintenance; your session was requeued at "
            "%(deadline)s and keeps its place by age"
        )
        % {"node": p.get("node", "?"), "deadline": _clock(p.get("deadline"))}
    ),
    Code.AGENT: lambda p: str(p.get("detail", "")),
    Code.START_FAILED: _start_failed,
    Code.BOOKING_ENDED: lambda p: _("the class booking of this desktop ended"),
    Code.IDLE_SUSPENDED: lambda p: (
        _(
            "suspended: nobody used this desktop since %(since)s; your home is kept. Resume "
            "it to queue it again"
        )
        % {"since": _clock(p.get("since"))}
    ),
    Code.IDLE_ENDED: lambda p: (
        _("ended: it stayed suspended for %(hours)s h") % {"hours": p.get("hours", "?")}
    ),
    Code.RESUMED: lambda p: _("resumed: back in the queue with its place kept by age"),
    Code.THESIS_GRANT_ENDED: lambda p: _(
        "your thesis grant has ended or was revoked: this request now waits as a hobby request"
    ),
    Code.ENROLMENT_ENDED: lambda p: (
        _("you are no longer enrolled in %(course)s: this request now waits as a hobby request")
        % {"course": p.get("course", "?")}
    ),
    Code.CLASS_STARTED_BY: lambda p: (
        _("started for your class by %(by)s") % {"by": p.get("by", "?")}
    ),
    Code.CLASS_STOPPED_BY: lambda p: (
        _("stopped with the rest of the class by %(by)s") % {"by": p.get("by", "?")}
    ),
    Code.NOTE: lambda p: str(p.get("text", "")),
}


def render(code: str, params: Mapping[str, Any] | None = None) -> str:
    """The reason as a sentence for the reader (active language and time zone)."""
    if not code:
        return ""
    try:
        known = Code(code)
    except ValueError:
        return code
    p = params or {}
    if known in QUOTA_CODES:
        return _("Held by a quota: %(why)s") % {"why": _quota(known, p)}
    return SENTENCES[known](p)


def render_reason(reason: Reason) -> str:
    return render(reason.code, reason.params)


def refusal(reason: Reason) -> str:
    """A reason as the message of a refused request: a sentence that starts with a capital."""
    if reason.code in QUOTA_CODES:
        text = _quota(reason.code, reason.params)
        return capfirst(text) + "."
    return capfirst(render_reason(reason))
