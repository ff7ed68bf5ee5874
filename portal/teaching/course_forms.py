"""Forms of the course pages. Each validates through the check_* services and keeps what
they return in ``self.checked`` for the view to hand to the matching do_* service."""

from __future__ import annotations

from typing import Any

from django import forms
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from people.models import Course
from portal.kit.form_fields import AsciiFloatField, AsciiIntegerField
from portal.kit.forms import CheckedForm
from scheduling.models import DesktopProfile
from scheduling.services import ServiceError
from scheduling.services.roster import (
    MAX_BYTES,
    RosterErrors,
    RowError,
    check_add_student,
    check_roster,
)
from scheduling.services.teaching import TA_PERMISSIONS, check_course_settings, check_ta


class _ServiceForm(CheckedForm):
    """A checked form of one course's page."""

    id_prefix = "course"  # one page holds several of these forms: ids must not clash

    def __init__(self, *args: Any, course: Course, **kwargs: Any) -> None:
        self.course = course
        kwargs.setdefault("auto_id", f"{self.id_prefix}-%s")
        super().__init__(*args, **kwargs)


class RosterImportForm(_ServiceForm):
    id_prefix = "roster"
    file = forms.FileField(
        label=_("Class list (CSV)"),
        required=False,
        help_text=_(
            "A header row, then one student a row: username or student id, name, e-mail. "
            "Comma or semicolon; UTF-8."
        ),
    )
    csv_text = forms.CharField(widget=forms.HiddenInput, required=False)
    sync = forms.BooleanField(
        label=_("Sync: also remove students who are not in the file"), required=False
    )
    action = forms.ChoiceField(
        choices=[("preview", _("Preview")), ("import", _("Import"))],
        required=False,
        widget=forms.HiddenInput,
    )

    row_errors: list[RowError]

    def check(self, data: dict[str, Any]) -> Any:
        self.row_errors = []
        upload = data.get("file")
        if upload is not None:
            content = upload.read(MAX_BYTES + 1)  # more is refused: never read it all
            self.csv_text_value = content.decode("utf-8-sig", errors="replace")
        elif data.get("csv_text"):
            content = data["csv_text"].encode("utf-8")
            self.csv_text_value = data["csv_text"]
        else:
            raise ServiceError(gettext("Choose the CSV file to import."), field="file")
        try:
            return check_roster(self.course, content, sync=bool(data.get("sync")))
        except RosterErrors as error:
            self.row_errors = error.errors
            raise


class AddStudentForm(_ServiceForm):
    id_prefix = "add"
    identity = forms.CharField(label=_("Username or student id"), max_length=150)
    name = forms.CharField(label=_("Name (for a new account)"), max_length=150, required=False)
    email = forms.CharField(
        label=_("E-mail (for a new account)"),
        max_length=254,
        required=False,
        widget=forms.EmailInput,
    )

    def check(self, data: dict[str, Any]) -> Any:
        return check_add_student(self.course, data["identity"], data["name"], data["email"])


class TaForm(_ServiceForm):
    id_prefix = "ta"
    username = forms.CharField(label=_("TA's username"), max_length=150)
    permissions = forms.MultipleChoiceField(
        label=_("The TA may"),
        choices=list(TA_PERMISSIONS.items()),
        widget=forms.CheckboxSelectMultiple,
        required=False,
    )

    def check(self, data: dict[str, Any]) -> Any:
        return check_ta(self.course, data["username"], data.get("permissions") or [])


class CourseSettingsForm(_ServiceForm):
    id_prefix = "settings"
    default_profile = forms.ModelChoiceField(
        label=_("Default desktop"),
        queryset=DesktopProfile.objects.filter(active=True),
        required=False,
        empty_label=_("none"),
        help_text=_("Offered first to the course's students; Start all uses it."),
    )
    max_sessions = AsciiIntegerField(
        label=_("Desktops at once (whole course)"),
        required=False,
        min_value=0,
        help_text=_("Empty: no course limit."),
    )
    max_gpu_hours_week = AsciiFloatField(
        label=_("GPU-hours per 7 days (whole course)"),
        required=False,
        min_value=0,
        help_text=_("Empty: no course limit."),
    )

    def check(self, data: dict[str, Any]) -> Any:
        profile = data.get("default_profile")
        return check_course_settings(
            profile.pk if profile else None,
            data.get("max_sessions"),
            data.get("max_gpu_hours_week"),
        )
