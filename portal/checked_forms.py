"""The pages' forms hand their typed fields to a service's ``check_*``."""

from __future__ import annotations

from typing import Any

from django import forms

from scheduling.services import ServiceError


class CheckedForm(forms.Form):
    """``clean`` calls :meth:`check` with the typed fields once they are valid; what it
    returns (if anything) is kept as ``checked``, and a ServiceError lands on the field it
    names (or on the form, when it names none of this form's fields)."""

    checked: Any = None

    def check(self, data: dict[str, Any]) -> Any:
        raise NotImplementedError

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if self.errors:
            return data
        try:
            result = self.check(data)
        except ServiceError as error:
            self.add_error(error.field if error.field in self.fields else None, error.message)
        else:
            if result is not None:
                self.checked = result
        return data
