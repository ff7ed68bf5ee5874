"""A person's saved language and time zone (Member.language, Member.time_zone)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.conf import settings
from django.contrib.auth.models import AnonymousUser, User
from django.http import HttpRequest
from django.utils import timezone, translation

from people.models import Member


def zone_of(name: str) -> ZoneInfo | None:
    """The zone a saved name stands for; None (the campus default) for blank or bad names."""
    if not name:
        return None
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return None


def saved_preferences(user: User | AnonymousUser) -> tuple[str, ZoneInfo | None]:
    """A signed-in person's saved language ("" for the browser's) and time zone."""
    if not user.is_authenticated:
        return "", None
    # Read through the relation, so that the rest of the request finds the row (a
    # department, for quotas), or that there is none, without asking again.
    member: Member | None = getattr(user, "member", None)
    if member is None:
        return "", None
    language = member.language if translation.check_for_language(member.language) else ""
    return language, zone_of(member.time_zone)


def apply_preferences(request: HttpRequest, user: User | AnonymousUser) -> None:
    """Activate a person's saved language (over the browser's) and time zone (else the
    campus default) for the rest of this request."""
    language, zone = saved_preferences(user)
    if language:
        translation.activate(language)
        request.LANGUAGE_CODE = translation.get_language()
    if zone is not None:
        timezone.activate(zone)
    else:
        timezone.deactivate()


def save_preferences(user: User, **choices: str) -> None:
    """Store a person's language and/or time zone on their Member (created when missing).
    Callers validate the values (``PreferencesForm``, ``save_language``)."""
    Member.objects.update_or_create(user=user, defaults=choices)


def save_language(user: User, language: str) -> None:
    """Remember a language choice made with the switcher; an unknown one is ignored."""
    if language in dict(settings.LANGUAGES):
        save_preferences(user, language=language)


class _Handshake:
    """A WebSocket handshake's headers and cookies, shaped as language negotiation reads a
    request."""

    def __init__(self, scope: Mapping[str, Any]) -> None:
        headers = dict(scope.get("headers") or [])
        self.META = {"HTTP_ACCEPT_LANGUAGE": headers.get(b"accept-language", b"").decode("latin-1")}
        self.COOKIES = scope.get("cookies") or {}
        self.path_info = "/"


def handshake_language(scope: Mapping[str, Any]) -> str:
    """The language a WebSocket's browser asks for (set_language cookie, Accept-Language)."""
    return translation.get_language_from_request(_Handshake(scope), check_path=False)  # type: ignore[arg-type]
