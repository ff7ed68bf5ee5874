"""The scheduling engine: pure Python, no Django. A snapshot and a clock go in, a plan comes out.

The portal's Celery cycle builds a :class:`Snapshot` from the database and applies the
:class:`Plan`; simulators and benchmarks drive the same :func:`plan`.
"""

from .model import FreeSlice, NodeState, Placement, Plan, QueuedRequest, QueueEntry, Snapshot
from .planner import plan

__all__ = [
    "FreeSlice",
    "NodeState",
    "Placement",
    "Plan",
    "QueueEntry",
    "QueuedRequest",
    "Snapshot",
    "plan",
]
