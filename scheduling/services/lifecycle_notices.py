"""A person's e-mail opt-in for time-limit and idle warnings (``LifecycleNotices``); the
account page sets it, ``services.idle.wants_email`` reads it."""

from __future__ import annotations

from django.contrib.auth.models import User

from ..models import LifecycleNotices


def email_warnings_of(user: User) -> bool:
    return LifecycleNotices.objects.filter(user=user, email_warnings=True).exists()


def set_email_warnings(user: User, wanted: bool) -> None:
    LifecycleNotices.objects.update_or_create(user=user, defaults={"email_warnings": wanted})
