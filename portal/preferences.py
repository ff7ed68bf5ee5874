"""A person's saved language and time zone (Member.language, Member.time_zone)."""

from __future__ import annotations

from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.conf import settings
from django.contrib.auth.models import AnonymousUser, User
from django.utils import translation

from .models import Member


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
    member = Member.objects.filter(user=user).only("language", "time_zone").first()
    if member is None:
        return "", None
    language = member.language if translation.check_for_language(member.language) else ""
    return language, zone_of(member.time_zone)


def save_language(user: User, language: str) -> None:
    """Remember a language choice on the person's Member (created when missing)."""
    if language in dict(settings.LANGUAGES):
        Member.objects.update_or_create(user=user, defaults={"language": language})
