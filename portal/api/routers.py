"""The user API's routers: a detail route's id is ASCII digits.

DRF's routers take any path segment as the id (``[^/.]+``) and leave it to each view to
read it; a view that did ``int(pk)`` answered ``/alerts/Õ/acknowledge/`` with a 500. Here
an id that is not digits matches no route: a JSON 404 (``portal.server.input_limits.not_found``),
and the views read only digits. A viewset that names its own ``lookup_value_regex`` (or
looks up by another field) keeps it.
"""

from __future__ import annotations

from typing import Any

from rest_framework.routers import DefaultRouter, SimpleRouter

ID_REGEX = "[0-9]+"


class DigitIds:
    def get_lookup_regex(self, viewset: Any, lookup_prefix: str = "") -> str:
        field = getattr(viewset, "lookup_field", "pk")
        if hasattr(viewset, "lookup_value_regex") or field not in ("pk", "id"):
            return super().get_lookup_regex(viewset, lookup_prefix)  # type: ignore[misc]
        kwarg = getattr(viewset, "lookup_url_kwarg", None) or field
        return f"(?P<{lookup_prefix}{kwarg}>{ID_REGEX})"


class IdRouter(DigitIds, SimpleRouter):
    """A SimpleRouter with digit ids."""


class IdDefaultRouter(DigitIds, DefaultRouter):
    """A DefaultRouter (the API root) with digit ids."""
