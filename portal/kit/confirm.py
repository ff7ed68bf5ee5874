"""Destructive actions ask first (docs/console.md, "Confirming destructive actions").

A form whose POST loses something carries ``data-confirm="<question>"`` (the
``{% confirm_question %}`` tag renders it here, through gettext, in the reader's language).
``static/deskpool/confirm.js`` asks that question with the browser's own dialog and, when
the person accepts, adds ``confirmed=1`` to the form before it is sent. The view calls
:func:`confirm_first` before acting: a POST without ``confirmed`` (no JavaScript, or a form
sent by other means) changes nothing and gets a page that asks the same question, with a
button that sends the same form again, confirmed, and a way back.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils.translation import gettext_lazy

CONFIRMED = "confirmed"

QUESTIONS = {
    "stop": gettext_lazy(
        "Stop this desktop? Unsaved work in open programs is lost; your home folder is kept."
    ),
    "stop_student": gettext_lazy(
        "Stop the desktop of %(name)s? Unsaved work in their open programs is lost; their "
        "home folder is kept."
    ),
    "stop_all": gettext_lazy(
        "Stop every desktop of %(course)s's class? Unsaved work in the students' open "
        "programs is lost; their home folders are kept."
    ),
    "cancel_series": gettext_lazy(
        "Cancel every coming booking of this weekly series? The reserved seats are given "
        "back to the pool and cannot be restored; you would have to book them again."
    ),
    "remove_student": gettext_lazy(
        "Remove %(name)s from %(course)s? They lose coursework priority for this course."
    ),
    "remove_ta": gettext_lazy(
        "Remove %(name)s as a TA of %(course)s? They lose every right they have in this course."
    ),
    "delete_quota": gettext_lazy(
        "Delete the quota for %(key)s? Its limits stop applying at once: the wider quota, or "
        "none, applies instead."
    ),
    "delete_file": gettext_lazy(
        "Delete %(name)s from your home folder? A deleted file or folder cannot be brought back."
    ),
    "delete_course_file": gettext_lazy(
        "Delete %(name)s from the course folder? Students' desktops no longer show it."
    ),
}

# The button that sends the form again, confirmed.
ANSWERS = {
    "stop": gettext_lazy("Stop the desktop"),
    "stop_student": gettext_lazy("Stop the desktop"),
    "stop_all": gettext_lazy("Stop all"),
    "cancel_series": gettext_lazy("Cancel the series"),
    "remove_student": gettext_lazy("Remove"),
    "remove_ta": gettext_lazy("Remove"),
    "delete_quota": gettext_lazy("Delete the quota"),
    "delete_file": gettext_lazy("Delete"),
    "delete_course_file": gettext_lazy("Delete"),
}


def question(action: str, **params: Any) -> str:
    """The question for ``action``, in the current language."""
    text = str(QUESTIONS[action])
    return text % params if params else text


def confirm_first(
    request: HttpRequest, action: str, back: str, **params: Any
) -> HttpResponse | None:
    """None when the POST is confirmed (go on); otherwise the page that asks first.
    ``back``: where "Go back" leads (the page the form was on)."""
    if request.POST.get(CONFIRMED) == "1":
        return None
    fields = [
        (name, value)
        for name, values in request.POST.lists()
        if name not in ("csrfmiddlewaretoken", CONFIRMED)
        for value in values
    ]
    return render(
        request,
        "confirm.html",
        {
            "question": question(action, **params),
            "answer": ANSWERS[action],
            "action": request.path,
            "fields": fields,
            "back": back,
        },
    )
