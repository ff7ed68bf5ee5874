"""The account page. The student's pages are in ``portal.student_views``."""

from __future__ import annotations

from zoneinfo import available_timezones

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _

from .forms import PreferencesForm
from .models import Member
from .people import signed_in
from .preferences import save_preferences


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
