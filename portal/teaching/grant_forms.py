"""Forms of the thesis-grant and quota-request pages; each asks its ``check_*`` service."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib.auth.models import User
from django.utils.translation import gettext_lazy as _

from portal.kit.form_fields import AsciiFloatField
from portal.kit.forms import CheckedForm
from scheduling.services.eligibility import eligible_courses
from scheduling.services.grants import GrantRequest, check_grant
from scheduling.services.quota_requests import (
    GRANT,
    REFUSE,
    AnswerRequest,
    AskRequest,
    check_answer,
    check_ask,
)


class _ServiceCheckedForm(CheckedForm):
    """A checked form that knows who is asking."""

    def __init__(self, user: User, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.user = user


class ThesisGrantForm(_ServiceCheckedForm):
    """Grant a student thesis status until a date (inclusive)."""

    student = forms.CharField(
        label=_("Student's username"),
        max_length=150,
        error_messages={"required": _("Enter the student's username.")},
    )
    until = forms.DateField(
        label=_("Last day"),
        widget=forms.DateInput(attrs={"type": "date"}),
        error_messages={
            "required": _("Enter the grant's last day."),
            "invalid": _("Enter the last day as a date, such as 2026-06-30."),
        },
    )
    note = forms.CharField(label=_("Note"), max_length=300, required=False)

    grant: GrantRequest | None = None

    def check(self, data: dict[str, Any]) -> None:
        self.grant = check_grant(self.user, data["student"], data["until"], data.get("note", ""))


class QuotaAskForm(_ServiceCheckedForm):
    """A student's request to a course's teachers for more GPU-hours."""

    course = forms.ChoiceField(
        label=_("Course"), error_messages={"required": _("Pick one of your courses.")}
    )
    hours = AsciiFloatField(
        label=_("Extra GPU-hours"),
        min_value=0.1,
        error_messages={
            "required": _("Say how many extra GPU-hours you need."),
            "invalid": _("Enter the GPU-hours as a number, such as 5."),
        },
    )
    reason = forms.CharField(
        label=_("What they are for"),
        max_length=2000,
        widget=forms.Textarea(attrs={"rows": 3}),
        error_messages={"required": _("Say what the extra GPU-hours are for.")},
    )

    ask: AskRequest | None = None

    def __init__(self, user: User, *args: Any, **kwargs: Any) -> None:
        super().__init__(user, *args, **kwargs)
        field = self.fields["course"]
        assert isinstance(field, forms.ChoiceField)
        field.choices = [(c.code, f"{c.code} · {c.title}") for c in eligible_courses(user)]

    def check(self, data: dict[str, Any]) -> None:
        self.ask = check_ask(self.user, data["course"], data["hours"], data["reason"])


class QuotaAnswerForm(_ServiceCheckedForm):
    """A teacher's answer: grant (the hours asked, or fewer) or refuse, with optional words."""

    decision = forms.ChoiceField(
        label=_("Answer"),
        choices=[(GRANT, _("Grant")), (REFUSE, _("Refuse"))],
        widget=forms.RadioSelect,  # the template lays the choices out as labelled radios
        error_messages={"required": _("Choose to grant or to refuse the request.")},
    )
    hours = AsciiFloatField(
        label=_("GPU-hours to grant"),
        required=False,
        min_value=0.1,
        error_messages={"invalid": _("Enter the GPU-hours as a number, such as 5.")},
    )
    answer = forms.CharField(
        label=_("Message to the student"),
        max_length=2000,
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
    )

    reply: AnswerRequest | None = None

    def __init__(self, user: User, request_id: int, *args: Any, **kwargs: Any) -> None:
        # One page lists a form per request: ids must not clash.
        kwargs.setdefault("auto_id", f"request-{request_id}-%s")
        super().__init__(user, *args, **kwargs)
        self.request_id = request_id

    def check(self, data: dict[str, Any]) -> None:
        self.reply = check_answer(
            self.user, self.request_id, data["decision"], data.get("hours"), data.get("answer", "")
        )
