"""The student's pages: home (request form and my sessions), a session, the desktop, history.

They call the scheduling services; live state arrives over Channels as the one rendering of
a session (``portal.kit.session_fragment``).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from django.contrib import messages
from django.contrib.auth.models import User
from django.db.models import F
from django.http import Http404, HttpRequest, HttpResponse
from django.middleware.csrf import get_token
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from portal.kit.confirm import ANSWERS, confirm_first
from portal.kit.person import signed_in, with_person
from portal.kit.session_fragment import DETAIL, ITEM, fragment_context
from portal.student.forms import SessionRequestForm
from portal.student.history import daily_gpu_hours, past_sessions
from scheduling.choices import (
    OPENABLE_STATES,
    TERMINAL_STATES,
    WAITING_STATES,
    Purpose,
    SessionState,
)
from scheduling.events import payload_reads, session_payload
from scheduling.models import Session
from scheduling.services import ServiceError
from scheduling.services.catalogue import profile_offers
from scheduling.services.eligibility import eligible_courses, eligible_purposes
from scheduling.services.extend import do_extend, profile_room
from scheduling.services.gateway_tickets import gateway_url
from scheduling.services.home_files import home_is_full
from scheduling.services.home_place import home_place
from scheduling.services.idle import LIMIT_WARNINGS, do_resume
from scheduling.services.quota_view import quota_left
from scheduling.services.sessions import do_stop, do_submit, hobby_refusal

CHART_DAYS = 14
# How long a try of the desktop page's screen may take to show the desktop (desktop.js): then it
# is given up, the page says so and tries again (with backoff, a bounded number of times).
SCREEN_ANSWER_S = 15


def _my_session(request: HttpRequest, session_id: int, *, to_open: bool = False) -> Session:
    """The session if this person may see it (or open it); 404 otherwise."""
    user = signed_in(request.user)
    read = payload_reads(Session.objects.all())
    session = read.seen_by(user, [session_id], to_open=to_open).get(session_id)
    if session is None:
        raise Http404(_("No such session."))
    return session


def _page_config(request: HttpRequest, form: str, **extra: Any) -> dict[str, Any]:
    """What the pages' scripts need: addresses, the CSRF token, words in the reader's language.
    ``form``: the session card's form the page shows (``session_fragment.PAGE_FORMS``), the
    only one its live updates carry."""
    return {
        # The live updates carry this form (live_socket.js updatesPath, #live-wire's path).
        "fragment": form,
        "csrf_token": get_token(request),
        "words": {
            "live": _("live"),
            "reconnecting": _("reconnecting…"),
            # The live socket stopped for good: signed out (or no longer allowed).
            "stopped": _("not live: sign in again, then reload the page"),
            # The time left on a session card (templates/portal/_session.html's words).
            "left_hm": _("%(h)s h %(m)s min left"),
            "left_m": _("%(m)s min left"),
        },
        **extra,
    }


def _home_context(request: HttpRequest, form: SessionRequestForm) -> dict[str, Any]:
    user = signed_in(request.user)
    mine = payload_reads(Session.objects.filter(user=user))
    purposes = eligible_purposes(user)
    quota = quota_left(user)
    return {
        "form": form,
        "offers": profile_offers(timezone.now()),
        "purposes": [(p.value, p.label) for p in purposes],
        # The pool's block level reached: the waits above hold for thesis and coursework only.
        "hobby_refused": hobby_refusal() if Purpose.HOBBY in purposes else "",
        # the default profile's id, for the form's script (templates/portal/home.html)
        "courses": eligible_courses(user).annotate(
            default_profile_id=F("default_desktop__profile")
        ),
        "quota": quota,
        # The open-session limit (do_submit's): "New desktop" is disabled, with the reason.
        "at_limit": quota.open_sessions >= quota.max_open_sessions,
        "cards": [
            fragment_context(session_payload(s), ITEM)
            for s in mine.exclude(state__in=TERMINAL_STATES).order_by("created_at")
        ],
        "recent": mine.filter(state__in=TERMINAL_STATES).order_by("-created_at")[:5],
        "config": _page_config(request, ITEM),
    }


@with_person
def home(request: HttpRequest, person: User) -> HttpResponse:
    form = SessionRequestForm(person)
    return render(request, "portal/home.html", _home_context(request, form))


@with_person
@require_POST
def submit_session(request: HttpRequest, user: User) -> HttpResponse:
    form = SessionRequestForm(user, request.POST)
    retry_after = None
    if form.is_valid() and form.checked is not None:
        try:
            session = do_submit(user, form.checked, by_person=True)
        except ServiceError as error:  # the open-session or the rate limit: nothing created
            form.add_error(None, error.message)
            retry_after = getattr(error, "retry_after", None)
        else:
            return redirect("session-page", session_id=session.pk)
    status = 400 if retry_after is None else 429
    response = render(request, "portal/home.html", _home_context(request, form), status=status)
    if retry_after is not None:
        response["Retry-After"] = str(retry_after)
    return response


@with_person
def session_detail(request: HttpRequest, person: User, session_id: int) -> HttpResponse:
    session = _my_session(request, session_id)
    data = session_payload(session)
    return render(
        request,
        "portal/session_detail.html",
        {
            "session": session,
            "card": fragment_context(data, DETAIL),
            "home": home_place(session),
            "config": _page_config(request, DETAIL),
        },
    )


@with_person
@require_POST
def stop_session(request: HttpRequest, person: User, session_id: int) -> HttpResponse:
    session = _my_session(request, session_id, to_open=True)
    back = reverse("session-page", args=[session.pk])
    if (ask := confirm_first(request, "stop", back)) is not None:
        return ask
    try:
        do_stop(person, session, by_person=True)
    except ServiceError as error:
        messages.warning(request, error.message)
    return redirect("session-page", session_id=session.pk)


@with_person
@require_POST
def extend_session(request: HttpRequest, person: User, session_id: int) -> HttpResponse:
    """One more step of time (``do_extend``); the new limit or the refusal's reason."""
    session = _my_session(request, session_id, to_open=True)
    try:
        extended = do_extend(person, session.pk)
    except ServiceError as error:
        messages.warning(request, error.message)
    else:
        when = timezone.localtime(extended.ends_at).strftime("%H:%M") if extended.ends_at else ""
        messages.success(
            request, _("Extended: this desktop now ends at %(time)s.") % {"time": when}
        )
    return redirect("session-page", session_id=session.pk)


@with_person
@require_POST
def resume_session(request: HttpRequest, person: User, session_id: int) -> HttpResponse:
    """Requeue a suspended session (``do_resume``)."""
    session = _my_session(request, session_id, to_open=True)
    try:
        do_resume(person, session.pk)
    except ServiceError as error:
        messages.warning(request, error.message)
    else:
        messages.success(request, _("Resumed: your desktop is back in the queue."))
    return redirect("session-page", session_id=session.pk)


@with_person
@require_POST
def cancel_session(request: HttpRequest, person: User, session_id: int) -> HttpResponse:
    """Withdraw a request still waiting in the queue (``do_stop`` on a waiting session)."""
    session = _my_session(request, session_id, to_open=True)
    if session.state not in WAITING_STATES:
        messages.warning(
            request,
            _("Request #%(id)s is no longer waiting, so it cannot be cancelled; stop it instead.")
            % {"id": session.pk},
        )
        return redirect("session-page", session_id=session.pk)
    try:
        do_stop(person, session, by_person=True)
    except ServiceError as error:
        messages.warning(request, error.message)
    else:
        messages.success(request, _("Request #%(id)s is cancelled.") % {"id": session.pk})
    return redirect("home")


@with_person
def desktop(request: HttpRequest, person: User, session_id: int) -> HttpResponse:
    session = _my_session(request, session_id, to_open=True)
    if session.state not in OPENABLE_STATES:
        messages.info(request, _("This desktop is not running; its page shows where it stands."))
        return redirect("session-page", session_id=session.pk)
    simulated = session.node is not None and session.node.runtime == "simulated"
    has_sound = session.desktop_audio_port is not None
    room = profile_room(session)
    config = _page_config(
        request,
        "none",  # the desktop's page shows no card: its banner reads the payload
        session=session_payload(session),
        # The screen and the sound go through the gateway on the desktop's node: the page
        # asks this for a single-use ticket and the gateway's URL before every try
        # (live_socket.js); the drawer's Sound where the desktop's image serves sound.
        ticket_api=reverse("session-ticket", args=[session.pk]),
        has_sound=has_sound,
        session_api=reverse("session-detail", args=[session.pk]),
        # The banner's and the drawer's Extend: the API's action (JSON: the session, or 409
        # and its reason); the profile's room, which the drawer applies to each new limit.
        extend_api=reverse("session-extend", args=[session.pk]),
        can_extend=room.last_end is not None,
        extend_last_end=room.last_end.isoformat() if room.last_end else None,
        extend_refusal=room.refusal,
        # The drawer's Stop, asked in the page first: the API's action (the session).
        stop_api=reverse("session-stop", args=[session.pk]),
        unstoppable=sorted(TERMINAL_STATES | {SessionState.STOPPING}),
        states={state.value: str(state.label) for state in SessionState},
        warn_minutes=sorted(LIMIT_WARNINGS, reverse=True),
        # The banner writes times (HH:MM) in the reader's zone, as the pages do.
        time_zone=timezone.get_current_timezone_name(),
        openable=sorted(OPENABLE_STATES),
        # A screen's try that has not shown the desktop by then is given up and tried again.
        screen_answer_s=SCREEN_ANSWER_S,
        words=_desktop_words(),
    )
    response = render(
        request,
        "portal/desktop.html",
        {
            "session": session,
            "simulated": simulated,
            "has_sound": has_sound,
            "config": config,
            "stop_answer": ANSWERS["stop"],
            # Last measured full: programs in the desktop cannot save (the disk refuses).
            "home_full": home_is_full(session.user),
        },
    )
    # The page opens the gateway's sockets and the drawer PUTs uploads to it: allowed where
    # they are not on the portal's origin.
    sources = _gateway_sources(session)
    if sources:
        response._csp_update = {"connect-src": sources}  # type: ignore[attr-defined]
        response._csp_update_ro = {"connect-src": sources}  # type: ignore[attr-defined]
    return response


def _gateway_sources(session: Session) -> list[str]:
    """The desktop's gateway's origins, for the page's connect-src: its sockets (ws:// or
    wss://) and its file uploads (http:// or https://). ``make demo`` and the tests reach a
    node's gateway directly (origins of its own); behind nginx they are the portal's own
    origin, already allowed."""
    if session.node is None or session.node.gateway_port is None:
        return []
    try:
        urls = [urlsplit(gateway_url(session, purpose)) for purpose in ("screen", "upload")]
    except ServiceError:
        return []  # an address the portal does not let browsers reach: no ticket either
    return [f"{url.scheme}://{url.netloc}" for url in urls]


def _desktop_words() -> dict[str, str]:
    """What desktop.js writes on the page, in the reader's language."""
    return {
        "connected": _("connected"),
        "disconnected": _("disconnected"),
        "retrying": _("connection lost: trying again in %(seconds)s s…"),
        "ended": _("the session has ended"),
        "refused": _("the desktop refused its password: stop and start a new session"),
        "signed_out": _("you are signed out: sign in again, then reopen this desktop"),
        "forbidden": _("you may no longer open this desktop"),
        "too_large": _(
            "the connection closed: more was sent at once than the desktop's connection carries "
            "(a very large paste?). Reload the page to reconnect."
        ),
        # Why the gateway's screen (and sound) stopped or is tried again (live_socket.js).
        "ticket_refused": _("the desktop's node did not accept this page's pass: reload the page"),
        "gave_up": _("the desktop could not be reached: reload the page to try again"),
        "retry_busy": _(
            "the desktop has as many connections as it may: trying again in %(seconds)s s…"
        ),
        "retry_unreachable": _("the desktop does not answer: trying again in %(seconds)s s…"),
        "retry_timeout": _(
            "the desktop did not answer within %(limit)s s: trying again in %(seconds)s s…"
        ),
        # Once the desktop has ended (desktop_ended.js).
        "ended_title": _("This desktop has ended"),
        "suspended_title": _("This desktop is suspended"),
        "time_left": _("Time left: %(time)s"),
        "limit_soon": _(
            "This desktop reaches its time limit in less than %(minutes)s minutes, at "
            "%(time)s: save your work."
        ),
        "extended": _("Extended: this desktop now ends at %(time)s."),
        "extend_failed": _("The desktop could not be given more time; try again in a moment."),
        "idle_warned": _(
            "This desktop has not been used for a while: it will be suspended at %(time)s "
            "unless you use it."
        ),
        "idle_warned_soon": _(
            "This desktop has not been used for a while: it will be suspended soon unless you "
            "use it."
        ),
        "suspended": _(
            "This desktop was suspended because nobody used it. Resume it to get back in the "
            "queue with your place kept."
        ),
        "suspended_status": _("the desktop is suspended"),
        "preempting": _(
            "This desktop stops in about %(minutes)s min to make room for a higher-priority "
            "request: save your work now. It goes back to the queue with its place kept."
        ),
        "home_full": _("Your home folder is full: delete files before you upload more."),
        "upload_failed": _(
            "The file did not reach the portal. Check your connection, then upload it again."
        ),
        "copied": _("Copied from the desktop."),
        "sent": _("Sent to the desktop's clipboard."),
        # The drawer (desktop_drawer.js).
        "ends_at": _("Ends at %(time)s"),
        "no_limit": _("No time limit"),
        "not_running": _("Only a running desktop can be given more time."),
        "state": _("Where it stands: %(state)s"),
        "stop_failed": _("The desktop could not be stopped; try again in a moment."),
        # The drawer's Sound (desktop_audio.js).
        "sound_play": _("Play the desktop's sound"),
        "sound_stop": _("Stop the sound"),
        "sound_off": _("Sound is off."),
        "sound_connecting": _("Connecting to the desktop's sound…"),
        "sound_playing": _(
            "Playing. No level on the meter: the desktop is silent. A level but nothing heard: "
            "check this device's volume."
        ),
        "sound_retrying": _("The sound was cut off: trying again…"),
        "sound_ended": _("The sound stopped: the desktop is no longer running."),
        "sound_none": _("This desktop has no sound."),
        "sound_gave_up": _("The desktop's sound could not be reached: turn it on again to retry."),
        "sound_unsupported": _(
            "This browser cannot play the desktop's sound; a recent Chrome, Edge, Firefox or "
            "Safari can."
        ),
        "sound_no_decoder": _(
            "This browser cannot decode the desktop's sound (Opus, through WebCodecs); a "
            "recent Chrome, Edge, Firefox or Safari can, on a page served over HTTPS."
        ),
    }


@with_person
def history(request: HttpRequest, user: User) -> HttpResponse:
    """Past desktops with their GPU-hours, and this week's GPU-hours against the quota."""
    now = timezone.now()
    days = daily_gpu_hours(user, now, CHART_DAYS)
    top = max([d.gpu_hours for d in days] + [0.01])
    bars = []
    for i, d in enumerate(days):
        height = round(60 * d.gpu_hours / top, 1)
        bars.append(
            {"day": d.day, "hours": d.gpu_hours, "x": i * 12 + 2, "y": 61 - height, "h": height}
        )
    return render(
        request,
        "portal/history.html",
        {
            "past": past_sessions(user, now),
            "bars": bars,
            "chart_days": CHART_DAYS,
            "chart_width": CHART_DAYS * 12,
            "quota": quota_left(user),
        },
    )
