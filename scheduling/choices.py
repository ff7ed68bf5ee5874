"""Enumerations of the resource side: session states, purposes, slice kinds."""

from __future__ import annotations

from django.db import models


class SessionState(models.TextChoices):
    QUEUED = "QUEUED", "Queued"
    PLACED = "PLACED", "Placed"
    STARTING = "STARTING", "Starting"
    RUNNING = "RUNNING", "Running"
    STOPPING = "STOPPING", "Stopping"
    ENDED = "ENDED", "Ended"
    PREEMPTING = "PREEMPTING", "Preempting"
    PREEMPTED = "PREEMPTED", "Preempted"
    FAILED = "FAILED", "Failed"
    EXPIRED = "EXPIRED", "Expired"
    CANCELLED = "CANCELLED", "Cancelled"
    LOST = "LOST", "Lost"


TERMINAL_STATES = frozenset(
    {
        SessionState.ENDED,
        SessionState.FAILED,
        SessionState.EXPIRED,
        SessionState.CANCELLED,
        SessionState.LOST,
    }
)
# States in which a session holds its allocation and the node should run its desktop
# (PREEMPTING: it runs on through its grace countdown).
ON_NODE_STATES = frozenset(
    {SessionState.PLACED, SessionState.STARTING, SessionState.RUNNING, SessionState.PREEMPTING}
)
WAITING_STATES = frozenset({SessionState.QUEUED, SessionState.PREEMPTED})
# States in which a desktop may still exist on the node (what a silent node's sweep moves).
NODE_BOUND_STATES = ON_NODE_STATES | {SessionState.STOPPING, SessionState.PREEMPTING}


class Purpose(models.TextChoices):
    THESIS = "thesis", "Thesis"
    COURSEWORK = "coursework", "Coursework"
    HOBBY = "hobby", "Hobby"


# Lower is served first.
PURPOSE_TIER = {Purpose.THESIS: 1, Purpose.COURSEWORK: 2, Purpose.HOBBY: 3}


class SliceKind(models.TextChoices):
    MIG = "mig", "MIG instance"
    SHARE = "share", "Time-sliced share"
    WHOLE = "whole", "Whole GPU"


class AuditKind(models.TextChoices):
    SESSION_SUBMITTED = "session.submitted"
    SESSION_TRANSITION = "session.transition"
    SESSION_PLACED = "session.placed"
    NODE_REGISTERED = "node.registered"
    NODE_SILENT = "node.silent"
    NODE_CORDONED = "node.cordoned"
    NODE_CORDON_CLEARED = "node.cordon_cleared"
    JOIN_TOKEN_CREATED = "node.join_token_created"
    CYCLE = "scheduler.cycle"
    SESSION_PREEMPTED = "session.preempted"
    SESSION_BLOCKED = "session.blocked"
    POOL_ALERT = "pool.alert"
    BOOKING_CREATED = "booking.created"
    BOOKING_CANCELLED = "booking.cancelled"
    POLICY_CHANGED = "policy.changed"
