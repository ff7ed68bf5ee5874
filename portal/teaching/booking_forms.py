"""Forms of the booking pages: book a lab (once or weekly), change one booking, pick a week.

The forms only read and shape the input; the checks are the services' (``check_series``,
``check_booking_change``), whose refusals land on the field they name.
"""

from __future__ import annotations

import re
from datetime import date, datetime
from typing import Any

from django import forms
from django.contrib.auth.models import User
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from portal.kit.form_fields import AsciiIntegerField
from portal.kit.forms import CheckedForm
from scheduling.models import Booking, DesktopProfile
from scheduling.services.booking_series import SeriesPlan, check_series
from scheduling.services.bookings import MAX_SEATS, BookingChange, check_booking_change

STEPS = [("check", gettext_lazy("Check")), ("confirm", gettext_lazy("Confirm"))]
STEPS_REST = [*STEPS, ("confirm_rest", gettext_lazy("Confirm without the conflicting dates"))]


def profile_label(profile: DesktopProfile) -> str:
    """A profile with what it gives: CPU, memory and GPU."""
    values = {
        "name": profile.name,
        "cpus": f"{profile.cpus:g}",
        "memory": profile.memory_mb,
        "count": profile.gpu_count,
        "gpu_memory": profile.gpu_memory_min_mb,
    }
    if profile.gpu_count:
        return (
            _("%(name)s — %(cpus)s CPU, %(memory)s MB RAM, %(count)s GPU ≥ %(gpu_memory)s MB")
            % values
        )
    return _("%(name)s — %(cpus)s CPU, %(memory)s MB RAM, no GPU") % values


class ProfileField(forms.ModelChoiceField):
    def label_from_instance(self, obj: Any) -> str:
        return profile_label(obj)


def parse_dates(text: str) -> list[date]:
    """ISO dates separated by commas, semicolons or new lines; spaces tolerated."""
    out = []
    for part in re.split(r"[,;\s]+", text or ""):
        if not part:
            continue
        try:
            out.append(date.fromisoformat(part))
        except ValueError as error:
            raise forms.ValidationError(
                _(
                    "“%(text)s” is not a date; write dates as YYYY-MM-DD, one per line "
                    "or comma-separated."
                )
                % {"text": part}
            ) from error
    return sorted(set(out))


class BookingForm(CheckedForm):
    """Seats × profile × window, once or weekly from the first date to the last."""

    field_names = {"course": "", "time_zone": ""}

    profile = ProfileField(
        queryset=DesktopProfile.objects.filter(active=True), label=gettext_lazy("Desktop")
    )
    seats = AsciiIntegerField(label=gettext_lazy("Seats"), min_value=1, max_value=MAX_SEATS)
    repeat = forms.ChoiceField(
        label=gettext_lazy("Repeat"),
        choices=[("once", gettext_lazy("Once")), ("weekly", gettext_lazy("Every week"))],
        widget=forms.RadioSelect,
        initial="once",
    )
    first_date = forms.DateField(
        label=gettext_lazy("First date"), widget=forms.DateInput(attrs={"type": "date"})
    )
    last_date = forms.DateField(
        label=gettext_lazy("Last date"),
        required=False,
        help_text=gettext_lazy("Weekly bookings only: the last week of the term."),
        widget=forms.DateInput(attrs={"type": "date"}),
    )
    starts = forms.TimeField(
        label=gettext_lazy("Start time"), widget=forms.TimeInput(attrs={"type": "time"})
    )
    ends = forms.TimeField(
        label=gettext_lazy("End time"), widget=forms.TimeInput(attrs={"type": "time"})
    )
    skip_dates = forms.CharField(
        label=gettext_lazy("Dates to skip"),
        required=False,
        help_text=gettext_lazy("YYYY-MM-DD, comma-separated or one per line (holidays)."),
        widget=forms.Textarea(attrs={"rows": 3}),
    )
    step = forms.ChoiceField(choices=STEPS_REST, required=False, widget=forms.HiddenInput)
    # Shown with the check's cautions (SeriesPlan.cautions): confirming them is a choice.
    accept_cautions = forms.BooleanField(
        label=gettext_lazy("Book anyway: I have read the cautions of the check"),
        required=False,
    )

    def clean_skip_dates(self) -> list[date]:
        return parse_dates(self.cleaned_data.get("skip_dates", ""))

    checked: SeriesPlan | None

    def __init__(self, *args: Any, person: User, course_code: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.person, self.course_code = person, course_code

    def check(self, data: dict[str, Any]) -> SeriesPlan:
        """The per-date check (``check_series``)."""
        return check_series(
            self.person,
            self.course_code,
            data["profile"].pk,
            data["seats"],
            data["first_date"],
            data.get("last_date"),
            data["repeat"] == "weekly",
            data["starts"],
            data["ends"],
            data["skip_dates"],
        )


class BookingEditForm(CheckedForm):
    """One booking's seats, date, times and profile."""

    field_names = {"starts_at": "starts", "ends_at": "ends"}

    profile = ProfileField(
        queryset=DesktopProfile.objects.filter(active=True), label=gettext_lazy("Desktop")
    )
    seats = AsciiIntegerField(label=gettext_lazy("Seats"), min_value=1, max_value=MAX_SEATS)
    day = forms.DateField(
        label=gettext_lazy("Date"), widget=forms.DateInput(attrs={"type": "date"})
    )
    starts = forms.TimeField(
        label=gettext_lazy("Start time"), widget=forms.TimeInput(attrs={"type": "time"})
    )
    ends = forms.TimeField(
        label=gettext_lazy("End time"), widget=forms.TimeInput(attrs={"type": "time"})
    )

    @classmethod
    def initial_for(cls, booking: Booking) -> dict[str, Any]:
        a, z = timezone.localtime(booking.starts_at), timezone.localtime(booking.ends_at)
        return {
            "profile": booking.profile_id,
            "seats": booking.seats,
            "day": a.date(),
            "starts": a.time().replace(second=0, microsecond=0),
            "ends": z.time().replace(second=0, microsecond=0),
        }

    checked: BookingChange | None

    def __init__(self, *args: Any, person: User, booking: Booking, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.person, self.booking = person, booking

    def check(self, data: dict[str, Any]) -> BookingChange:
        zone = timezone.get_current_timezone()
        return check_booking_change(
            self.person,
            self.booking,
            seats=data["seats"],
            starts_at=datetime.combine(data["day"], data["starts"], tzinfo=zone),
            ends_at=datetime.combine(data["day"], data["ends"], tzinfo=zone),
            profile_id=data["profile"].pk,
        )


class WeekForm(forms.Form):
    week = forms.DateField(required=False)

    def monday(self) -> date:
        """The Monday of the asked week (this week when none or a bad date is asked)."""
        day = self.cleaned_data.get("week") if self.is_valid() else None
        day = day or timezone.localdate()
        return date.fromordinal(day.toordinal() - day.weekday())
