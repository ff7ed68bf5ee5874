"""Business logic of the resource side, as ``check_*`` / ``do_*`` functions."""

from django.utils.translation import gettext as _


class ServiceError(Exception):
    """A request the service refuses; the message tells the person what to do next."""

    def __init__(self, message: str, *, field: str | None = None, code: str = "invalid"):
        super().__init__(message)
        self.message = message
        self.field = field
        self.code = code


class NotFound(ServiceError):
    def __init__(self, message: str | None = None):
        super().__init__(message or _("Not found."), code="not_found")


class Conflict(ServiceError):
    def __init__(self, message: str):
        super().__init__(message, code="conflict")
