"""The scheduling engine: pure Python, no Django. A snapshot and a clock go in, a plan comes out.

The portal's Celery cycle builds a :class:`Snapshot` from the database and applies the
:class:`Plan`; simulators and benchmarks drive the same :func:`plan`.
"""

from .model import (
    Alert,
    Booking,
    FreeSlice,
    NodeState,
    Placement,
    Plan,
    Policy,
    Preemption,
    QueuedRequest,
    QueueEntry,
    Quota,
    Rack,
    RunningSession,
    Snapshot,
)
from .planner import admission_block, alert_for, plan, quota_block, utilisation
from .scoring import TargetShape

__all__ = [
    "Alert",
    "Booking",
    "FreeSlice",
    "NodeState",
    "Placement",
    "Plan",
    "Policy",
    "Preemption",
    "QueueEntry",
    "QueuedRequest",
    "Quota",
    "Rack",
    "RunningSession",
    "Snapshot",
    "TargetShape",
    "admission_block",
    "alert_for",
    "plan",
    "quota_block",
    "utilisation",
]
