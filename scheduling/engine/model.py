"""Plain data the engine reads and writes (no Django, no I/O).

A :class:`Snapshot` is the pool at one instant: nodes with their CPU/RAM headroom, the free
slices, the sessions holding slices, the waiting requests, class bookings, quotas and the
admin's :class:`Policy`. :func:`scheduling.engine.plan` turns it into a :class:`Plan`.

Units: GPU capacity in *milli-GPU* (1000 = one whole GPU; a 1g.10gb MIG instance of an A100
is 1000/7, a share of a 4-share GPU 250); compute in normalised compute units (CU, see
``scheduling.engine.compute``); times are aware datetimes and durations seconds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from .reasons import Reason
from .scoring import TargetShape

TIER_BOOKED = 0  # a class booking inside its window
TIER_THESIS = 1
# The tiers' keys, as reasons carry them (the presenter names them in the reader's language).
TIER_KEYS = {0: "booked", 1: "thesis", 2: "coursework", 3: "hobby"}


@dataclass(frozen=True)
class Policy:
    """The admin-editable knobs (``scheduling.models.PoolPolicy`` holds them in the portal)."""

    warn_utilisation: float = 0.80  # alert above this share of GPU capacity in use
    block_utilisation: float = 0.90  # refuse new hobby requests above this
    temperature_limit_c: float = 85.0  # no new work on a GPU at or above this
    protected_runtime_s: int = 15 * 60  # never preempt a session younger than this
    grace_s: int = 5 * 60  # a preempted desktop keeps running this long
    aging_s_per_gpu_hour: float = 15 * 60  # waiting this long offsets one GPU-hour of usage
    booking_hold_horizon_s: int = 24 * 3600  # bookings starting within this hold capacity
    default_duration_s: int = 4 * 3600  # expected run time when a request gives none
    heavy_duration_s: int = 4 * 3600  # at least this long and whole GPUs: "long, heavy work"


@dataclass(frozen=True)
class NodeState:
    node_id: int
    hostname: str
    healthy: bool
    cpus_free: float
    memory_free_mb: int
    rack: str = ""
    network_plane: str = ""
    high_power: bool = False  # high-power or liquid-cooled rack: preferred for heavy work
    # Pairs of GPU ids joined by NVLink (either order).
    nvlink: frozenset[tuple[int, int]] = frozenset()
    # The node's whole CPU and memory (what it has, busy or not): a desktop larger than
    # these can never run on it. None: not known (no such limit is checked).
    cpus_total: float | None = None
    memory_total_mb: int | None = None
    # Sessions placed here whose desktop is not running yet (PLACED, STARTING): the node's
    # agent starts a few at a time, so a long backlog delays every start behind it.
    pending_starts: int = 0

    def could_hold(self, cpus: float, memory_mb: int) -> bool:
        """Could one desktop of this CPU and memory ever run here (the node empty)?"""
        return (self.cpus_total is None or cpus <= self.cpus_total + 1e-9) and (
            self.memory_total_mb is None or memory_mb <= self.memory_total_mb
        )


WHOLE = "whole"  # the kind of a slice that is a whole GPU


@dataclass(frozen=True)
class FreeSlice:
    """A slice (MIG instance, share or whole GPU); free when in ``Snapshot.free_slices``."""

    slice_id: int
    node_id: int
    gpu_id: int
    kind: str  # mig | share | whole
    memory_mb: int
    gpu_model: str
    milli: int = 1000  # the part of its GPU this slice is
    compute_units: float = 1.0
    temperature_c: float | None = None  # of its GPU, when the agent reports it
    power_w: float = 0.0  # added rack draw when the slice is busy


@dataclass(frozen=True)
class Rack:
    name: str
    budget_w: float
    draw_w: float
    stopped: bool = False  # at its power warning (an open alert): no new work until it drops


@dataclass(frozen=True)
class QueuedRequest:
    session_id: int
    tier: int  # lower is served first (1 thesis, 2 coursework, 3 hobby)
    submitted_at: datetime
    gpu_count: int
    gpu_memory_min_mb: int
    allowed_kinds: tuple[str, ...]
    cpus: float
    memory_mb: int
    user: str = ""
    course: str = ""
    department: str = ""
    booking_id: int | None = None
    duration_s: int = 0  # expected run time; 0 = the policy's default
    gpu_models: tuple[str, ...] = ()  # empty = any model
    compute_min: float = 0.0  # CU per GPU
    usage_gpu_hours: float = 0.0  # the user's recent usage, decayed (fair share)
    multi_node: bool = False  # may span nodes of one network plane
    # An admin's boost: ahead of every unboosted request of its tier (earlier boosts first).
    boosted_at: datetime | None = None
    # The nodes that keep the person's home to themselves (no shared home root), most
    # preferred first: the first of them that fits takes the request (``placement.at_home``).
    home_nodes: tuple[int, ...] = ()


@dataclass(frozen=True)
class RunningSession:
    """A session holding capacity now (placed, starting, running or in its preemption grace)."""

    session_id: int
    tier: int
    node_id: int
    slices: tuple[FreeSlice, ...]
    cpus: float
    memory_mb: int
    started_at: datetime
    ends_at: datetime  # expected end (max duration, or the preemption deadline)
    user: str = ""
    course: str = ""
    department: str = ""
    booking_id: int | None = None
    preempted_for: int | None = None  # set while in its grace countdown


@dataclass(frozen=True)
class Booking:
    """An instructor's booking: ``seats`` desktops of one shape in ``[starts_at, ends_at)``."""

    booking_id: int
    course: str
    seats: int
    starts_at: datetime
    ends_at: datetime
    shape: QueuedRequest  # session_id is ignored
    # The nodes that keep homes of the course's students to themselves, each with how many
    # of them still want a seat there (most first): the booking's holds, and so its warm
    # desktops, prefer them (``holds.hold_bookings``, a tie-break: ``placement.HOME_WEIGHT``).
    home_nodes: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True)
class Quota:
    """Limits for one user, course or department, with what is in use now.

    ``key`` ``"*"`` is the default for every member of the scope without a quota of its own.
    """

    scope: str  # user | course | department
    key: str
    max_sessions: int | None = None
    max_gpu_hours_week: float | None = None
    max_slice_memory_mb: int | None = None
    sessions: int = 0  # sessions holding capacity now
    gpu_hours_week: float = 0.0  # CU-normalised GPU-hours used in the last 7 days


@dataclass(frozen=True)
class Snapshot:
    nodes: tuple[NodeState, ...]
    free_slices: tuple[FreeSlice, ...]
    queue: tuple[QueuedRequest, ...]
    running: tuple[RunningSession, ...] = ()
    bookings: tuple[Booking, ...] = ()
    quotas: tuple[Quota, ...] = ()
    racks: tuple[Rack, ...] = ()
    policy: Policy = Policy()
    # The target workload of the fragmentation score; empty = the queue's and bookings' mix.
    workload: tuple[TargetShape, ...] = ()


def expected_duration_s(request: QueuedRequest, policy: Policy) -> int:
    """The request's expected run time: its own, else the policy's default."""
    return request.duration_s or policy.default_duration_s


@dataclass(frozen=True)
class Placement:
    session_id: int
    node_id: int
    slice_ids: tuple[int, ...]
    # Multi-node placements: the other nodes' (node_id, slice_ids), same network plane.
    others: tuple[tuple[int, tuple[int, ...]], ...] = ()
    # For a request with home nodes: Code.PLACED_HOME (on one of them) or Code.PLACED_AWAY
    # (none could take it); None otherwise (the portal says Code.PLACED).
    reason: Reason | None = None


@dataclass(frozen=True)
class Preemption:
    victim_id: int
    for_session_id: int
    deadline: datetime
    reason: Reason  # Code.PREEMPTED: for_tier, deadline


@dataclass(frozen=True)
class QueueEntry:
    session_id: int
    position: int  # 1, 2, ... in serving order; 0 when blocked
    reason: Reason  # a waiting code, Code.NO_FIT, or a quota code when blocked
    eta: datetime | None = None
    blocked: bool = False  # by a quota or a rule: it will not start until that changes


@dataclass(frozen=True)
class Alert:
    level: str  # ok | warn | block
    utilisation: float
    reason: Reason  # Code.POOL_OK, POOL_WARN or POOL_BLOCKED


@dataclass(frozen=True)
class BookingHold:
    """Capacity a booking holds at the end of the plan: one seat's slices on one node."""

    booking_id: int
    node_id: int
    slice_ids: tuple[int, ...]
    cpus: float
    memory_mb: int


@dataclass
class Plan:
    placements: list[Placement] = field(default_factory=list)
    queue: list[QueueEntry] = field(default_factory=list)
    preemptions: list[Preemption] = field(default_factory=list)
    alert: Alert | None = None
    notes: list[Reason] = field(default_factory=list)  # Code.BOOKING_SHORT: seats not held
    # Holds still standing (not taken by a booked placement or a backfill), by booking start.
    holds: list[BookingHold] = field(default_factory=list)
