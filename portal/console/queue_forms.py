"""Forms of the console's queue, quota and profile pages; each asks its ``check_*`` service
and puts a refusal next to the field it names."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib.auth.models import User
from django.utils.functional import lazy
from django.utils.text import format_lazy
from django.utils.translation import gettext_lazy as _

from portal.kit.form_fields import AsciiFloatField, AsciiIntegerField
from portal.kit.forms import CheckedForm
from scheduling.choices import SliceKind
from scheduling.labels import torch_images_help
from scheduling.models import DesktopProfile, Quota, Session
from scheduling.models.policy import QuotaScope
from scheduling.services.catalogue_changes import (
    QUOTA_FIELDS,
    ProfileChange,
    QuotaChange,
    check_grant_cap,
    check_profile,
    check_quota,
)
from scheduling.services.console_queue import MAX_REASON_LENGTH, check_queue_action


class QueueActionForm(CheckedForm):
    """Cancel or boost one waiting request: the reason goes to the audit trail."""

    reason = forms.CharField(
        label=_("Reason"),
        max_length=MAX_REASON_LENGTH,
        error_messages={"required": _("Give a reason: it is kept in the audit trail.")},
    )

    session: Session | None = None

    def __init__(self, admin: User, session_id: int, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.admin = admin
        self.session_id = session_id

    def check(self, data: dict[str, Any]) -> None:
        self.session = check_queue_action(self.admin, self.session_id, data["reason"])


class GrantCapForm(CheckedForm):
    """The pool's cap on extra GPU-hours granted to one person over 7 days."""

    max_granted_gpu_hours_week = AsciiFloatField(
        label=_("Extra GPU-hours one person may be granted in 7 days"),
        help_text=_(
            "All courses' granted quota requests together; answers past it are refused. "
            "0: no request can be granted."
        ),
        error_messages={"required": _("Enter a number of GPU-hours, 0 or more.")},
    )

    def check(self, data: dict[str, Any]) -> float:
        return check_grant_cap(data["max_granted_gpu_hours_week"])


def _optional_number(field: type[forms.Field], label: Any, help_text: Any) -> Any:
    return field(
        label=label,
        required=False,
        help_text=help_text,
        error_messages={"invalid": _("Enter a number, or leave it empty for no limit.")},
    )


class QuotaForm(CheckedForm):
    """One quota row: a scope, a key (``*`` = the scope's default) and its limits."""

    scope = forms.ChoiceField(label=_("Applies to"), choices=QuotaScope.choices)
    key = forms.CharField(
        label=_("Who"),
        max_length=150,
        help_text=_("A username, a course code or a department; * for everyone else."),
        error_messages={"required": _("Say who the quota is for, or * for everyone else.")},
    )
    max_sessions = _optional_number(AsciiIntegerField, _("Desktops at once"), _("Empty: no limit."))
    max_gpu_hours_week = _optional_number(
        AsciiFloatField, _("GPU-hours over 7 days"), _("Empty: no limit.")
    )
    max_slice_memory_mb = _optional_number(
        AsciiIntegerField, _("Largest slice (MB of GPU memory)"), _("Empty: no limit.")
    )
    max_home_mb = _optional_number(
        AsciiIntegerField,
        _("Home folder (MB)"),
        _("Per person, user quotas only. Empty: the portal's default; 0: no limit."),
    )

    change: QuotaChange | None = None

    def __init__(self, *args: Any, quota: Quota | None = None, **kwargs: Any) -> None:
        if quota is not None and "initial" not in kwargs:
            kwargs["initial"] = {name: getattr(quota, name) for name in QUOTA_FIELDS}
        super().__init__(*args, **kwargs)
        self.quota = quota

    def check(self, data: dict[str, Any]) -> None:
        self.change = check_quota(data, quota=self.quota)


class ProfileForm(CheckedForm):
    """One desktop profile of the catalogue."""

    slug = forms.SlugField(
        label=_("Short name (in addresses)"),
        max_length=60,
        error_messages={"required": _("Give a short name: letters, digits and dashes.")},
    )
    name = forms.CharField(label=_("Name"), max_length=120)
    description = forms.CharField(
        label=_("Description"), required=False, widget=forms.Textarea(attrs={"rows": 2})
    )
    image = forms.CharField(
        label=_("Container image"),
        max_length=200,
        required=False,
        help_text=format_lazy(
            "{} {}",
            _("For example registry.example.edu/desktops/painting:1.4"),
            lazy(torch_images_help, str)(),
        ),
    )
    cpus = AsciiFloatField(label=_("CPUs"), initial=2.0)
    memory_mb = AsciiIntegerField(label=_("Memory (MB)"), initial=4096)
    gpu_count = AsciiIntegerField(
        label=_("GPUs"), initial=1, help_text=_("0 for a CPU-only desktop.")
    )
    gpu_memory_min_mb = AsciiIntegerField(
        label=_("GPU memory at least (MB)"), initial=0, help_text=_("0 for a CPU-only desktop.")
    )
    allowed_kinds = forms.MultipleChoiceField(
        label=_("Slice kinds allowed"),
        choices=SliceKind.choices,
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text=_("None for a CPU-only desktop."),
    )
    gpu_models = forms.CharField(
        label=_("GPU models (comma-separated parts of names)"),
        required=False,
        help_text=_("Empty: any model."),
    )
    max_duration_minutes = AsciiIntegerField(label=_("Longest session (minutes)"), initial=240)
    active = forms.BooleanField(label=_("Offered to users"), required=False, initial=True)

    change: ProfileChange | None = None

    def __init__(self, *args: Any, profile: DesktopProfile | None = None, **kwargs: Any) -> None:
        if profile is not None and "initial" not in kwargs:
            initial = {name: getattr(profile, name) for name in self.base_fields}
            initial["gpu_models"] = ", ".join(profile.gpu_models or [])
            kwargs["initial"] = initial
        super().__init__(*args, **kwargs)
        self.profile = profile

    def check(self, data: dict[str, Any]) -> None:
        models_text = data.get("gpu_models") or ""
        fields = {
            **data,
            "gpu_models": [m.strip() for m in models_text.split(",") if m.strip()],
        }
        self.change = check_profile(fields, profile=self.profile)
