"""The signed-in person's language and time zone, for every request (docs/i18n.md).

``LocaleMiddleware`` has already picked a language from the browser (the ``set_language``
cookie, then Accept-Language). A person who saved a language on their Member gets that one
instead, whatever the browser says, and their saved time zone (else the campus default,
``settings.TIME_ZONE``). Switching language through ``set_language`` while signed in saves
the choice on the Member.

``ClientAddressMiddleware`` gives every audit event a request writes the client's address
(docs/audit.md).
"""

from __future__ import annotations

from collections.abc import Callable

from django.contrib.auth.models import User
from django.http import HttpRequest, HttpResponse
from django.urls import reverse

from people.preferences import apply_preferences, save_language
from portal.kit.client_address import client_address_of
from scheduling.services.audit import requests_from


class PreferencesMiddleware:
    """After authentication: activate the person's saved language and time zone."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        apply_preferences(request, request.user)
        response = self.get_response(request)
        if (
            request.method == "POST"
            and request.path == reverse("set_language")
            and isinstance(request.user, User)
            and request.user.is_authenticated
        ):
            save_language(request.user, request.POST.get("language", ""))
        return response


class ClientAddressMiddleware:
    """The audit events written while a request is served carry its client's address."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        with requests_from(client_address_of(request)):
            return self.get_response(request)
