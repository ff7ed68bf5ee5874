"""E-mail to one person, in their saved language and time zone, sent after the commit."""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.core.mail import send_mail
from django.db import transaction
from django.template.loader import render_to_string
from django.utils import timezone, translation

from people.models import Member

log = logging.getLogger(__name__)


def _preferences(user: User) -> tuple[str, str]:
    member = Member.objects.filter(user=user).first()
    language = (member.language if member else "") or settings.LANGUAGE_CODE
    zone = (member.time_zone if member else "") or settings.TIME_ZONE
    return language, zone


def render_notice(user: User, template: str, context: dict[str, Any]) -> tuple[str, str]:
    """Subject and body of ``templates/email/<template>_subject.txt`` and ``<template>.txt``,
    rendered in the person's language and time zone."""
    language, zone = _preferences(user)
    with translation.override(language), timezone.override(zone):
        context = {"user": user, **context}
        subject = render_to_string(f"email/{template}_subject.txt", context)
        body = render_to_string(f"email/{template}.txt", context)
    return " ".join(subject.split()), body


def notify(user: User, template: str, context: dict[str, Any]) -> None:
    """After the surrounding transaction commits, e-mail the person (nobody without an
    address). A mail server that fails never undoes the change it reports."""
    if not user.email:
        return
    subject, body = render_notice(user, template, context)
    transaction.on_commit(lambda: _send(user.email, subject, body))


def _send(address: str, subject: str, body: str) -> None:
    try:
        send_mail(subject, body, None, [address])
    except Exception:  # the change stands; the page and the live update still tell them
        log.exception("could not e-mail %s: %s", address, subject)
