"""The pages' forms hand their typed fields to a service's ``check_*``."""

from __future__ import annotations

from django import forms

from scheduling.form_checks import ServiceChecked


class CheckedForm(ServiceChecked, forms.Form):
    """A page's form checked by a service (``scheduling.form_checks.ServiceChecked``)."""
