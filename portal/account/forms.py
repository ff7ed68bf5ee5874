"""Forms of the account page."""

from __future__ import annotations

from django import forms

from people.models import Member


class PreferencesForm(forms.ModelForm):
    """A person's language and time zone (blank: the browser's language, the campus zone)."""

    class Meta:
        model = Member
        fields = ["language", "time_zone"]
        widgets = {"time_zone": forms.TextInput(attrs={"list": "time-zones"})}
