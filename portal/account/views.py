"""The account page. The student's pages are in ``portal.student.views``."""

from __future__ import annotations

from zoneinfo import available_timezones

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.models import User
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from people.models import Member
from people.preferences import save_preferences
from portal.account.forms import PreferencesForm
from portal.kit.person import with_person
from scheduling.services.lifecycle_notices import (
    EmailChoices,
    email_choices_of,
    set_email_choices,
)


@with_person
def account(request: HttpRequest, person: User) -> HttpResponse:
    """The person's language and time zone."""
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
        "emails": email_choices_of(person),
    }
    return render(request, "portal/account.html", context, status=status)


@with_person
@require_POST
def account_notices(request: HttpRequest, person: User) -> HttpResponse:
    """The e-mails a person chose: a desktop ready, about to be preempted, and the time-limit
    and idle warnings (checkboxes: absent is off)."""
    chosen = EmailChoices(
        ready=request.POST.get("email_ready") == "on",
        preempting=request.POST.get("email_preempting") == "on",
        warnings=request.POST.get("email_warnings") == "on",
    )
    set_email_choices(person, chosen)
    if chosen == EmailChoices():
        messages.success(
            request, _("No e-mails: the pages and browser notifications still tell you.")
        )
    else:
        messages.success(request, _("Your e-mail choices are saved."))
    return redirect("account")
