"""What the campus day keeps: sessions running and waiting, queue episodes, the day's result."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime

from scheduling.engine import FreeSlice

from .pool import Pool
from .workload import Config, Job, Profile

DAY = datetime(2025, 3, 11, tzinfo=UTC)  # a Tuesday; only the clock matters
TIERS = ("booked class", "thesis", "coursework", "hobby")  # the report's names, by tier


@dataclass
class Run:
    job: Job
    node_id: int
    slices: tuple[FreeSlice, ...]
    started_s: int
    end_s: int  # when it ends by itself
    expected_end_s: int
    episode: int
    submitted_at: datetime  # the original submission, kept when requeued
    preempted_for: int | None = None
    deadline_s: int | None = None


@dataclass
class Wait:
    job: Job
    submitted_at: datetime  # the original submission: kept across preemptions
    enqueued_s: int
    episode: int
    remaining_s: int  # work left
    expected_left_s: int
    first_eta: datetime | None = None


@dataclass
class Episode:
    """One stay in the queue: submitted (or requeued) to started, abandoned or end of day."""

    session_id: int
    user: str
    tier: str  # one of TIERS
    enqueued_s: int
    started_s: int | None = None
    abandoned: bool = False
    requeued: bool = False
    eta_s: int | None = None


@dataclass
class DayResult:
    config: Config
    pool: Pool
    held_milli_s: float = 0.0
    span_s: int = 0
    episodes: list[Episode] = field(default_factory=list)
    preemptions: list[dict] = field(default_factory=list)
    requeues: list[dict] = field(default_factory=list)
    refused: int = 0  # submit attempts refused (hobby above the block threshold)
    refused_requests: int = 0  # hobby requests refused on every attempt
    demand: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    received: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    holds: list[tuple[int, int, int, int]] = field(default_factory=list)  # slice, sid, from, to
    cycles: int = 0
    plan_s: float = 0.0
    wall_s: float = 0.0
    peak_research_milli: int = 0
    research_jobs: int = 0
    quota_refused: int = 0  # submissions refused by a quota (Config.quotas)
    notes: set[str] = field(default_factory=set)  # the plans' notes, as the report words them
    timeline: list[dict] = field(default_factory=list)  # every 15 simulated minutes


def nominal_milli(pool: Pool, p: Profile) -> int:
    """Milli of the smallest slice in the pool that fits the profile, times its GPU count."""
    fits = [s.milli for s in pool.slices if s.kind in p.kinds and s.memory_mb >= p.memory_min_mb]
    return min(fits) * p.gpu_count if fits else 1000 * p.gpu_count
