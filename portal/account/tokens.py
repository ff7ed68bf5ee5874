"""The account's API tokens page (``/account/tokens/``): list, create and revoke your own.

Thin over scheduling.services.api_tokens, as the API's ``/api/v1/auth/tokens/`` is. A new
token is shown on the page once, never again (only its digest is kept).
"""

from __future__ import annotations

from django import forms
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.models import User
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from portal.kit.person import with_person
from scheduling.services.api_tokens import NAME_MAX, issue_token, revoke_own, tokens_of


class TokenNameForm(forms.Form):
    name = forms.CharField(
        label=gettext_lazy("Name"),
        max_length=NAME_MAX,
        required=False,
        help_text=gettext_lazy("What the token is for, e.g. my laptop's scripts."),
    )


@never_cache
@with_person
def api_tokens(request: HttpRequest, person: User) -> HttpResponse:
    form = TokenNameForm(request.POST or None)
    issued = ""
    status = 200
    if request.method == "POST":
        if form.is_valid():
            _token, issued = issue_token(person, form.cleaned_data["name"])
            form = TokenNameForm()
        else:
            status = 400
    context = {
        "form": form,
        "issued": issued,
        "tokens": tokens_of(person),
        "lifetime_days": settings.API_TOKEN_DAYS,
    }
    return render(request, "portal/api_tokens.html", context, status=status)


@with_person
@require_POST
def revoke_api_token(request: HttpRequest, person: User, token_id: int) -> HttpResponse:
    if not revoke_own(person, token_id):
        raise Http404(_("You hold no working API token by that id."))
    messages.success(request, _("The API token is revoked."))
    return redirect("account-tokens")
