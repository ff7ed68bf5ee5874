"""Plain data the engine reads and writes."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

TIER_NAMES = {0: "booked class", 1: "thesis", 2: "coursework", 3: "hobby"}


@dataclass(frozen=True)
class NodeState:
    node_id: int
    hostname: str
    healthy: bool
    cpus_free: float
    memory_free_mb: int


@dataclass(frozen=True)
class FreeSlice:
    slice_id: int
    node_id: int
    gpu_id: int
    kind: str  # mig | share | whole
    memory_mb: int
    gpu_model: str


@dataclass(frozen=True)
class QueuedRequest:
    session_id: int
    tier: int  # lower is served first
    submitted_at: datetime
    gpu_count: int
    gpu_memory_min_mb: int
    allowed_kinds: tuple[str, ...]
    cpus: float
    memory_mb: int


@dataclass(frozen=True)
class Snapshot:
    nodes: tuple[NodeState, ...]
    free_slices: tuple[FreeSlice, ...]
    queue: tuple[QueuedRequest, ...]


@dataclass(frozen=True)
class Placement:
    session_id: int
    node_id: int
    slice_ids: tuple[int, ...]


@dataclass(frozen=True)
class QueueEntry:
    session_id: int
    position: int
    reason: str


@dataclass
class Plan:
    placements: list[Placement] = field(default_factory=list)
    queue: list[QueueEntry] = field(default_factory=list)
