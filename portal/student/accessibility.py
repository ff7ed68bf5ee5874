"""The Accessibility page (/accessibility/, linked from every page's footer): what the portal
supports, its known limits, and where to report a barrier. Open to everyone, signed in or not."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_safe


@require_safe
def accessibility(request: HttpRequest) -> HttpResponse:
    """The statement, in the reader's language, with the address from ACCESSIBILITY_CONTACT."""
    return render(request, "portal/accessibility.html", {"contact": settings.ACCESSIBILITY_CONTACT})
