"""The scheduling engine: pure Python, no Django. A snapshot and a clock go in, a plan comes out.

The portal's Celery cycle builds a :class:`Snapshot` from the database and applies the
:class:`Plan`; simulators and benchmarks drive the same :func:`plan`. Code outside the engine
imports from here (and may import :mod:`scheduling.engine.reasons`), not from the modules
inside; the simulators may use the internals.

Modules: ``model`` (the data), ``reasons`` (codes and parameters), ``planner`` (``plan``: the
order and the steps), ``quotas`` (quotas, admission, the pool alert), ``pool`` (the pool during
a cycle: capacity and feasibility), ``placement`` (node scores, the best node), ``holds``
(booking holds, backfill), ``preempt`` (preemption), ``explain`` (queue reasons and estimated
starts), ``workload`` (the target workload), ``scoring`` (fragmentation scores, shared with the
trace simulator), ``compute`` (compute units, milli-GPU of a slice), ``mig`` (MIG tables),
``booking_fit`` (does a class booking fit the pool next to the others; its alternatives).
"""

from . import booking_fit as fit_codes
from .booking_fit import (
    Alternative,
    BookingFit,
    HeldBooking,
    Needs,
    Pool,
    PoolNode,
    PoolSlice,
    booking_alternatives,
    booking_fit,
)
from .compute import gpu_compute_units, slice_milli
from .explain import never_fits
from .mig_check import LayoutProblem, Problem, ReportedInstance, check_layout
from .model import (
    TIER_BOOKED,
    TIER_KEYS,
    TIER_THESIS,
    Alert,
    Booking,
    BookingHold,
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
    expected_duration_s,
)
from .planner import effective_tier, plan
from .quotas import (
    admission_block,
    admission_may_block,
    alert_for,
    count_session,
    index_quotas,
    quota_block,
    quota_for,
    utilisation,
)
from .reasons import Code, Reason
from .scoring import TargetShape

__all__ = [
    "Alternative",
    "BookingFit",
    "HeldBooking",
    "Needs",
    "Pool",
    "PoolNode",
    "PoolSlice",
    "booking_alternatives",
    "booking_fit",
    "check_layout",
    "LayoutProblem",
    "Problem",
    "ReportedInstance",
    "never_fits",
    "fit_codes",
    "TIER_BOOKED",
    "TIER_KEYS",
    "TIER_THESIS",
    "Alert",
    "Booking",
    "BookingHold",
    "Code",
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
    "Reason",
    "RunningSession",
    "Snapshot",
    "TargetShape",
    "admission_block",
    "admission_may_block",
    "alert_for",
    "count_session",
    "effective_tier",
    "expected_duration_s",
    "gpu_compute_units",
    "index_quotas",
    "plan",
    "quota_block",
    "quota_for",
    "slice_milli",
    "utilisation",
]
