"""The OpenAPI schema documents every error an operation may answer, not only its success.

DRF answers the same errors for every view: 400 for a body or query that does not validate,
401 without credentials, 403 without the permission, 404 for an id that is not there (or not
yours), 409 when a service refuses a change for the state things are in
(``portal.api.errors``), 415 for a body that is not JSON or a form. Rather than repeat
them on each view, :class:`DeskpoolAutoSchema` (``REST_FRAMEWORK["DEFAULT_SCHEMA_CLASS"]``)
adds the ones that apply to an operation; what a view declares itself with
``extend_schema(responses=...)`` (the agent API's pydantic answers) is kept as it is, and a
view that declares a 401 or a 403 has said which of the two it answers.
Checked by tests/security/test_schemathesis.py.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.openapi import AutoSchema
from rest_framework import serializers

BODY_METHODS = {"POST", "PUT", "PATCH"}
WRITE_METHODS = BODY_METHODS | {"DELETE"}


class ErrorDetailSerializer(serializers.Serializer):
    """DRF's error body: one sentence in the reader's language."""

    detail = serializers.CharField()


# 400: field by field ({"field": ["message"], "non_field_errors": [...]}) or one ``detail``.
VALIDATION_ERROR: dict[str, Any] = {
    "type": "object",
    "description": "What is wrong: a list of messages per field, or one detail.",
    "additionalProperties": {},
}


class DeskpoolAutoSchema(AutoSchema):
    def _get_response_bodies(self, direction: Any = "response") -> dict[str, Any]:
        responses = super()._get_response_bodies(direction)
        # A view that documents its own 401 or 403 knows which of them it answers (the
        # agent API's node token: 401, never 403).
        auth_documented = "401" in responses or "403" in responses
        for code, body in self._error_bodies().items():
            if code in responses or (auth_documented and code in ("401", "403")):
                continue
            responses[code] = self._get_response_for_code(body, code, direction=direction)
        return responses

    def _error_bodies(self) -> dict[str, Any]:
        has_body = self.method in BODY_METHODS
        parameters = self._get_parameters()
        errors: dict[str, Any] = {}
        if has_body or any(p["in"] == "query" for p in parameters):
            errors["400"] = VALIDATION_ERROR
        if self.get_auth():
            errors["401"] = ErrorDetailSerializer
            errors["403"] = ErrorDetailSerializer
        if any(p["in"] == "path" for p in parameters):
            errors["404"] = ErrorDetailSerializer
        if self.method in WRITE_METHODS:
            errors["409"] = ErrorDetailSerializer
        if has_body:
            errors["415"] = ErrorDetailSerializer
        return errors
