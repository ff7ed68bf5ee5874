"""The one base of the pages' forms that a service checks: ``clean`` hands the typed fields
to the form's ``check`` (a service's ``check_*``); what it returns is ``checked``, and a
refusal lands on the field it names. Forms no service checks (a week picker, a search) are
plain ``forms.Form``."""

from __future__ import annotations

from django import forms

from scheduling.form_checks import ServiceChecked


class CheckedForm(ServiceChecked, forms.Form):
    """A page's form checked by a service (``scheduling.form_checks.ServiceChecked``)."""
