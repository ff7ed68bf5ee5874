"""Forms of the pages."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib.auth.models import User
from django.utils.translation import gettext_lazy as _

from people.models import COURSE_CODE_MAX
from portal.kit.form_fields import AsciiIntegerField
from portal.kit.forms import CheckedForm
from scheduling.services.sessions import SubmitRequest, check_submit


class SessionRequestForm(CheckedForm):
    """A request for a desktop: the profile, the purpose and (for coursework) the course.

    The fields take what is posted and ``clean`` asks ``check_submit``, so a refusal says in
    plain words what is wrong, on the field at fault; the page offers only what the person may
    use (``eligibility``), the service decides.
    """

    profile = AsciiIntegerField(
        error_messages={
            "required": _("Pick a desktop profile."),
            "invalid": _("Pick a desktop profile from the list."),
        }
    )
    purpose = forms.CharField(error_messages={"required": _("Pick a purpose.")})
    course = forms.CharField(required=False, max_length=COURSE_CODE_MAX)

    checked: SubmitRequest | None

    def __init__(self, user: User, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.user = user

    def check(self, data: dict[str, Any]) -> SubmitRequest:
        return check_submit(self.user, data["profile"], data["purpose"], data.get("course") or None)
