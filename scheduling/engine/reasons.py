"""Why a request waits, is refused or is moved: a code plus parameters, never a sentence.

The engine and the portal's services emit :class:`Reason` values; sessions store the code and
the parameters; ``scheduling.presenters`` renders them in the reader's language and time zone.
Parameters are plain JSON values, except times, which are aware :class:`datetime` objects
(stored as ISO 8601 strings and read back as datetimes by the presenter, see ``TIME_PARAMS``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any


class Code(StrEnum):
    """Every reason the portal can show; the presenter has one sentence for each."""

    # -- the engine: waiting in the queue (params: tier, ahead, higher, gpu_count, memory_mb)
    WAITING = "waiting"  # waiting for a free slice
    WAITING_HOT = "waiting_hot"  # + limit_c: the free slices that fit are too hot
    WAITING_HELD = "waiting_held"  # what is free is held for a class booking
    # starting once `count` desktops stop at `deadline` (their grace): ones preempted for it
    # in an earlier cycle, or ones of lower priority preempted for it in this one
    WAITING_VICTIMS = "waiting_victims"  # count, deadline
    WAITING_PREEMPTING = "waiting_preempting"  # count, deadline
    NO_FIT = "no_fit"  # gpu_count, memory_mb, kinds, models: no healthy node can ever run it
    # tier, ahead, higher: no healthy node takes new work (every one cordoned, draining or
    # silent): the pool is closed for maintenance; no estimate, the place is kept
    POOL_CLOSED = "pool_closed"
    # -- the engine: quotas (scope: user|course|department, key)
    QUOTA_SLICE_MEMORY = "quota_slice_memory"  # limit_mb, need_mb
    QUOTA_GPU_HOURS = "quota_gpu_hours"  # limit, used
    QUOTA_SESSIONS = "quota_sessions"  # limit
    # -- the engine: admission, preemption and the pool alert
    POOL_BLOCK = "pool_block"  # utilisation, limit (ratios 0..1): hobby refused at submit
    PREEMPTED = "preempted"  # for_tier, deadline: stops at the deadline, then requeued
    POOL_OK = "pool_ok"  # utilisation
    POOL_WARN = "pool_warn"  # utilisation, limit
    POOL_BLOCKED = "pool_blocked"  # utilisation, limit
    BOOKING_SHORT = "booking_short"  # booking, course, held, need: seats that do not fit
    # -- the engine: where a request with home nodes went (docs/scheduling.md, "Homes")
    PLACED_HOME = "placed_home"  # node: on the node that keeps the person's home
    PLACED_AWAY = "placed_away"  # node, home: the home's node could not take it
    # -- the portal: lifecycle
    SUBMITTED = "submitted"  # waiting for the scheduler's first look
    PLACED = "placed"  # placed; waiting for the node to start the desktop
    PLACED_WARM = "placed_warm"  # placed on a desktop started ahead for the class
    PLACED_SEAT = "placed_seat"  # placed on a seat of the class; the node starts it
    STARTING = "starting"
    STOPPING = "stopping"
    STOPPED = "stopped"
    TIME_LIMIT = "time_limit"  # minutes
    REQUEUED_PREEMPTED = "requeued_preempted"  # back in the queue with its place kept
    NODE_SILENT_REQUEUED = "node_silent_requeued"  # node, since
    NODE_SILENT_ENDED = "node_silent_ended"  # node, since
    NODE_DRAINED_REQUEUED = "node_drained_requeued"  # node, deadline: its drain's deadline passed
    # node, gpu (its index): the desktop's GPU reported a fault and takes no new work
    GPU_CORDONED = "gpu_cordoned"
    GPU_DRAINED_REQUEUED = "gpu_drained_requeued"  # node, gpu: an admin emptied the sick GPU
    AGENT = "agent"  # detail: what the node's agent said (its own words, not translated)
    # cause: a nodeagent.failures code (not_enough_cpus, image_missing, ...); node. The
    # agent's own words are kept for the admins (the transition's audit event), not here.
    START_FAILED = "start_failed"
    BOOKING_ENDED = "booking_ended"  # the class booking this desktop belonged to ended
    IDLE_SUSPENDED = "idle_suspended"  # since: quiet since then; suspended, the home kept
    IDLE_ENDED = "idle_ended"  # hours: suspended that long, so ended
    RESUMED = "resumed"  # resumed by its person: back in the queue with its age kept
    # -- the portal: who may ask for what (checked again at placement)
    THESIS_GRANT_ENDED = "thesis_grant_ended"  # until: no thesis grant now; now a hobby request
    ENROLMENT_ENDED = "enrolment_ended"  # course: not enrolled any more; now a hobby request
    CLASS_STARTED_BY = "class_started_by"  # by: a teacher started this desktop for the class
    CLASS_STOPPED_BY = "class_stopped_by"  # by: a teacher stopped the class's desktops
    NOTE = "note"  # text: a sentence stored before reasons were codes (shown as it is)


# Parameters holding aware datetimes (ISO 8601 strings once stored).
TIME_PARAMS = frozenset({"deadline", "eta", "since", "until"})


@dataclass(frozen=True)
class Reason:
    code: Code
    params: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in TIME_PARAMS & self.params.keys():
            value = self.params[name]
            if isinstance(value, datetime) and value.tzinfo is None:
                raise ValueError(f"reason parameter {name} must be an aware datetime")

    def with_params(self, **extra: Any) -> Reason:
        return Reason(self.code, {**self.params, **extra})
