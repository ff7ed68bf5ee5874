"""Turning service refusals into API answers a client can act on.

``exception_handler`` is ``REST_FRAMEWORK["EXCEPTION_HANDLER"]``: an API view lets a
``ServiceError`` (or a subclass: NotFound, Conflict, Forbidden, RateLimited) go, and the
client gets what ``as_api_error`` makes of it; anything else is DRF's own handling.
"""

from __future__ import annotations

from typing import Any

from rest_framework import status
from rest_framework.exceptions import APIException, NotFound, PermissionDenied, ValidationError
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from scheduling.services import Conflict, ServiceError
from scheduling.services import NotFound as ServiceNotFound
from scheduling.services.eligibility import Forbidden
from scheduling.services.rate_limits import RateLimited


class ConflictError(APIException):
    status_code = status.HTTP_409_CONFLICT
    default_code = "conflict"


class RateLimitedError(APIException):
    """429; DRF's exception handler turns ``wait`` into the Retry-After header."""

    status_code = status.HTTP_429_TOO_MANY_REQUESTS
    default_code = "throttled"

    def __init__(self, detail: str, wait: int):
        super().__init__(detail)
        self.wait = wait


def as_api_error(error: ServiceError) -> APIException:
    if isinstance(error, ServiceNotFound):
        return NotFound(error.message)
    if isinstance(error, Forbidden):  # who may see the thing but not do this to it
        return PermissionDenied(error.message)
    if isinstance(error, RateLimited):
        return RateLimitedError(error.message, error.retry_after)
    if isinstance(error, Conflict):
        return ConflictError(error.message)
    if error.field:
        return ValidationError({error.field: [error.message]})
    return ValidationError({"non_field_errors": [error.message]})


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, ServiceError):
        exc = as_api_error(exc)
    return drf_exception_handler(exc, context)
