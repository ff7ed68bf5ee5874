"""The one base of the pages' forms that a service checks: ``clean`` hands the typed fields
to the form's ``check`` (a service's ``check_*``); what it returns is ``checked``, and a
refusal lands on the field it names. Forms no service checks (a week picker, a search) are
plain ``forms.Form``."""

from __future__ import annotations

from typing import Any

from django import forms

from scheduling.services import ServiceError


class ServiceChecked:
    """Mixed into a ``forms.Form`` or ``forms.ModelForm``: ``clean`` calls :meth:`check`
    with the typed fields once they are valid; what it returns (if anything) is kept as
    ``checked``, and a ServiceError lands on the field it names (or on the form, when it
    names none of this form's fields)."""

    checked: Any = None
    # A service's field name -> this form's, where they differ ("" or absent: the form's).
    field_names: dict[str, str] = {}

    def check(self, data: dict[str, Any]) -> Any:
        raise NotImplementedError

    def add_service_error(self, error: ServiceError) -> None:
        """The refusal on the field it names, or on the form when it names none of its own;
        also for a refusal that comes later, from the ``do_*`` the view calls."""
        name = self.field_names.get(error.field or "", error.field)
        fields = self.fields  # type: ignore[attr-defined]
        self.add_error(name if name in fields else None, error.message)  # type: ignore[attr-defined]

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}  # type: ignore[misc]
        if self.errors:  # type: ignore[attr-defined]
            return data
        try:
            result = self.check(data)
        except ServiceError as error:
            self.add_service_error(error)
        else:
            if result is not None:
                self.checked = result
        return data


class CheckedForm(ServiceChecked, forms.Form):
    """A page's form checked by a service (:class:`ServiceChecked`)."""
