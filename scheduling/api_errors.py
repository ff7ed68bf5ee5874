"""Turning service refusals into API answers a client can act on."""

from __future__ import annotations

from rest_framework import status
from rest_framework.exceptions import APIException, NotFound, ValidationError

from .services import Conflict, ServiceError
from .services import NotFound as ServiceNotFound
from .services.rate_limits import RateLimited


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
    if isinstance(error, RateLimited):
        return RateLimitedError(error.message, error.retry_after)
    if isinstance(error, Conflict):
        return ConflictError(error.message)
    if error.field:
        return ValidationError({error.field: [error.message]})
    return ValidationError({"non_field_errors": [error.message]})
