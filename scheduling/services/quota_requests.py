"""Requests for more GPU-hours: a student asks a course's teachers, who grant or refuse.

A granted request adds its hours to the student's weekly GPU-hour limit for 7 days from the
answer (:func:`extra_gpu_hours`, read where the quota limits are built for both the submit
check and the engine's snapshot).
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime

from ..models.policy import QuotaRequest, QuotaRequestState
from .usage import WEEK


def extra_gpu_hours(now: datetime) -> dict[str, float]:
    """Granted extra GPU-hours per username, for requests answered in the last 7 days."""
    extra: dict[str, float] = defaultdict(float)
    for username, hours in QuotaRequest.objects.filter(
        state=QuotaRequestState.GRANTED, answered_at__gt=now - WEEK, answered_at__lte=now
    ).values_list("student__username", "hours"):
        extra[username] += hours
    return dict(extra)
