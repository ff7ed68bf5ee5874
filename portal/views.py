"""Server-rendered pages. They call the scheduling services; live state arrives over Channels."""

from __future__ import annotations

from zoneinfo import available_timezones

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from scheduling.choices import OPENABLE_STATES, TERMINAL_STATES, Purpose, SessionState
from scheduling.models import DesktopProfile, Session
from scheduling.services import ServiceError
from scheduling.services.sessions import check_submit, do_stop, do_submit

from .api.serializers import SessionSerializer
from .forms import PreferencesForm
from .models import Member
from .people import signed_in
from .preferences import save_preferences


def _my_session(request: HttpRequest, session_id: int, *, to_open: bool = False) -> Session:
    sessions = (
        Session.objects.openable_by(request.user)
        if to_open
        else (Session.objects.visible_to(request.user))
    )
    session = (
        sessions.select_related("profile", "node", "user")
        .prefetch_related("allocations__slice__gpu")
        .filter(pk=session_id)
        .first()
    )
    if session is None:
        raise Http404(_("No such session."))
    return session


def _home_context(request: HttpRequest, **extra: object) -> dict:
    user = signed_in(request.user)
    return {
        "profiles": DesktopProfile.objects.filter(active=True),
        "purposes": Purpose.choices,
        "courses": user.courses_enrolled.all(),
        "sessions": Session.objects.filter(user=user)
        .exclude(state__in=TERMINAL_STATES)
        .select_related("profile"),
        "recent": Session.objects.filter(user=user, state__in=TERMINAL_STATES).select_related(
            "profile"
        )[:5],
        **extra,
    }


@login_required
def home(request: HttpRequest) -> HttpResponse:
    return render(request, "portal/home.html", _home_context(request))


@login_required
@require_POST
def submit_session(request: HttpRequest) -> HttpResponse:
    form = {
        "profile": request.POST.get("profile", ""),
        "purpose": request.POST.get("purpose", ""),
        "course": request.POST.get("course", ""),
    }
    try:
        if not form["profile"].isdigit():
            raise ServiceError(_("Pick a desktop profile."), field="profile")
        submit = check_submit(
            signed_in(request.user), int(form["profile"]), form["purpose"], form["course"] or None
        )
        session = do_submit(signed_in(request.user), submit)
    except ServiceError as error:
        context = _home_context(request, form=form, error=error)
        return render(request, "portal/home.html", context, status=400)
    return redirect("session-page", session_id=session.pk)


@login_required
def session_detail(request: HttpRequest, session_id: int) -> HttpResponse:
    session = _my_session(request, session_id)
    data = SessionSerializer(session).data
    return render(
        request,
        "portal/session_detail.html",
        {"session": session, "data": data, "words": _session_words()},
    )


def _session_words() -> dict[str, object]:
    """What session.js writes on the page, in the reader's language."""
    return {
        "states": {value: str(label) for value, label in SessionState.choices},
        "live": _("live"),
        "reconnecting": _("reconnecting…"),
    }


@login_required
@require_POST
def stop_session(request: HttpRequest, session_id: int) -> HttpResponse:
    session = _my_session(request, session_id, to_open=True)
    try:
        do_stop(signed_in(request.user), session)
    except ServiceError as error:
        messages.warning(request, error.message)
    return redirect("session-page", session_id=session.pk)


@login_required
def desktop(request: HttpRequest, session_id: int) -> HttpResponse:
    session = _my_session(request, session_id, to_open=True)
    if session.state not in OPENABLE_STATES:
        messages.info(request, _("This desktop is not running; its page shows where it stands."))
        return redirect("session-page", session_id=session.pk)
    simulated = session.node is not None and session.node.runtime == "simulated"
    return render(
        request,
        "portal/desktop.html",
        {"session": session, "simulated": simulated, "password": session.vnc_password},
    )


@login_required
def account(request: HttpRequest) -> HttpResponse:
    """The person's language and time zone."""
    person = signed_in(request.user)
    member = Member.objects.filter(user=person).first() or Member(user=person)
    form = PreferencesForm(request.POST or None, instance=member)
    if request.method == "POST":
        if form.is_valid():
            save_preferences(
                person,
                language=form.cleaned_data["language"],
                time_zone=form.cleaned_data["time_zone"],
            )
            messages.success(request, _("Your settings are saved."))
            return redirect("account")
        status = 400
    else:
        status = 200
    context = {
        "form": form,
        "time_zones": sorted(available_timezones()),
        "campus_zone": settings.TIME_ZONE,
    }
    return render(request, "portal/account.html", context, status=status)
