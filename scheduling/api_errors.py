"""Turning service refusals into API answers a client can act on."""

from __future__ import annotations

from rest_framework import status
from rest_framework.exceptions import APIException, NotFound, ValidationError

from .services import Conflict, ServiceError
from .services import NotFound as ServiceNotFound


class ConflictError(APIException):
    status_code = status.HTTP_409_CONFLICT
    default_code = "conflict"


def as_api_error(error: ServiceError) -> APIException:
    if isinstance(error, ServiceNotFound):
        return NotFound(error.message)
    if isinstance(error, Conflict):
        return ConflictError(error.message)
    if error.field:
        return ValidationError({error.field: [error.message]})
    return ValidationError({"non_field_errors": [error.message]})
