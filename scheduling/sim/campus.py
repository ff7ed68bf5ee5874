"""One simulated campus day on the demo pool, driven by the engine (``scheduling.engine.plan``).

``python -m scheduling.sim campus [--seed 42] [--cycle 30] [--json PATH]``; see ``docs/campus.md``.

The simulator plays the portal's part: every ``cycle_s`` simulated seconds, and right after every
arrival, departure or end of a preemption grace, it builds a :class:`Snapshot` (nodes with their
CPU/RAM headroom, free slices, running sessions with their expected ends, the queue with the
users' decayed usage, the class bookings, the default :class:`Policy`) and applies the
:class:`Plan`: placements start sessions on exactly the slices named, preemptions put the victims
into their grace countdown (``preempted_for`` set, ``ends_at`` = the deadline), and at the
deadline a victim goes back to the queue with its original ``submitted_at``. Hobby requests are
refused at submit above the policy's block threshold (``admission_block``), as the portal does.

Pure Python, deterministic per seed, no Django.
"""

from __future__ import annotations

import heapq
import json
import math
import random
from collections import defaultdict
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

from scheduling.engine import (
    Booking,
    FreeSlice,
    NodeState,
    Policy,
    QueuedRequest,
    RunningSession,
    Snapshot,
    admission_block,
    plan,
)
from scheduling.engine.compute import gpu_compute_units, slice_milli
from scheduling.engine.mig import can_place, table_for, validate_layout
from scheduling.engine.model import TIER_NAMES

DAY = datetime(2025, 3, 11, tzinfo=UTC)  # a Tuesday; only the clock matters
HOUR = 3600
TIERS = ("booked class", "thesis", "coursework", "hobby")
A100 = "NVIDIA A100-SXM4-80GB"
T4 = "Tesla T4"
# GPU memory of each MIG instance as the demo fleet (nodeagent/fleets/demo.yaml) reports it.
MIG_MEMORY_MB = {"1g.10gb": 9984, "2g.20gb": 19968, "3g.40gb": 40192, "4g.40gb": 40192}


# -- the pool -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class GpuLayout:
    mode: str  # mig | whole | share
    profiles: tuple[str, ...] = ()  # mig: the instances of each GPU
    shares: int = 1  # share: slices per GPU


@dataclass(frozen=True)
class NodeSpec:
    name: str
    gpu_model: str
    gpu_count: int
    gpu_memory_mb: int
    layout: GpuLayout
    cpus: int
    memory_mb: int
    high_power: bool
    nvlink: bool


DEMO_MIG = GpuLayout("mig", ("3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"))
MEDIUM_MIG = GpuLayout("mig", ("3g.40gb", "2g.20gb", "2g.20gb"))
WHOLE = GpuLayout("whole")

# The demo fleet's five nodes; gpu-a03/a04 are exposed whole (MIG off), see docs/campus.md.
DEFAULT_LAYOUT: tuple[NodeSpec, ...] = (
    NodeSpec("gpu-a01", A100, 8, 81920, DEMO_MIG, 128, 1048576, True, True),
    NodeSpec("gpu-a02", A100, 8, 81920, MEDIUM_MIG, 128, 1048576, True, True),
    NodeSpec("gpu-a03", A100, 8, 81920, WHOLE, 128, 1048576, True, True),
    NodeSpec("gpu-a04", A100, 8, 81920, WHOLE, 128, 1048576, True, True),
    NodeSpec("gpu-t01", T4, 3, 15360, GpuLayout("share", shares=4), 32, 196608, False, False),
)


@dataclass
class Pool:
    nodes: list[NodeSpec]
    slices: list[FreeSlice]
    capacity_milli: int

    @property
    def gpus(self) -> int:
        return sum(n.gpu_count for n in self.nodes)


def mig_instances(gpu_model: str, profiles: tuple[str, ...]) -> list[tuple[str, int]]:
    """``(profile, start)`` for each instance, placed best-fit and checked against the table."""
    table = table_for(gpu_model)
    placed: list[tuple[str, int]] = []
    for name in profiles:
        start = can_place(table, placed, name)
        if start is None:
            raise ValueError(f"{name} does not fit next to {placed} on {gpu_model}")
        placed.append((name, start))
    if not validate_layout(table, placed):
        raise ValueError(f"invalid MIG layout {placed} on {gpu_model}")
    return placed


def build_pool(layout: tuple[NodeSpec, ...] = DEFAULT_LAYOUT) -> Pool:
    slices: list[FreeSlice] = []
    sid = 0
    for node_id, spec in enumerate(layout, start=1):
        cu, _ = gpu_compute_units(spec.gpu_model)
        for g in range(spec.gpu_count):
            gpu_id = node_id * 100 + g
            if spec.layout.mode == "mig":
                parts = [
                    (MIG_MEMORY_MB[p], slice_milli("mig", spec.gpu_model, p))
                    for p, _ in mig_instances(spec.gpu_model, spec.layout.profiles)
                ]
            elif spec.layout.mode == "share":
                n = spec.layout.shares
                parts = [(spec.gpu_memory_mb // n, slice_milli("share", spec.gpu_model, shares=n))]
                parts *= n
            else:
                parts = [(spec.gpu_memory_mb, slice_milli("whole", spec.gpu_model))]
            for memory_mb, milli in parts:
                sid += 1
                kind = spec.layout.mode
                slices.append(
                    FreeSlice(
                        sid,
                        node_id,
                        gpu_id,
                        kind,
                        memory_mb,
                        spec.gpu_model,
                        milli,
                        cu * milli / 1000,
                    )
                )
    return Pool(list(layout), slices, sum(s.milli for s in slices))


def node_states(pool: Pool, cpus_used: dict[int, float], mem_used: dict[int, int]) -> tuple:
    out = []
    for node_id, spec in enumerate(pool.nodes, start=1):
        links: frozenset[tuple[int, int]] = frozenset()
        if spec.nvlink:
            ids = [node_id * 100 + g for g in range(spec.gpu_count)]
            links = frozenset((a, b) for i, a in enumerate(ids) for b in ids[i + 1 :])
        out.append(
            NodeState(
                node_id,
                spec.name,
                True,
                spec.cpus - cpus_used.get(node_id, 0.0),
                spec.memory_mb - mem_used.get(node_id, 0),
                rack="r1" if node_id <= 2 else ("r2" if node_id <= 4 else "r3"),
                network_plane="ib0" if spec.high_power else "eth0",
                high_power=spec.high_power,
                nvlink=links,
            )
        )
    return tuple(out)


# -- the workload -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Profile:
    name: str
    gpu_count: int
    memory_min_mb: int
    kinds: tuple[str, ...]
    cpus: float
    memory_mb: int


PAINTING = Profile("AI painting", 1, 3840, ("share", "mig"), 2, 4096)
BLENDER = Profile("3D modelling", 1, 8192, ("mig", "whole"), 2, 8192)
MEDICAL_10 = Profile("medical imaging 10 GB", 1, 9984, ("mig", "whole"), 2, 8192)
MEDICAL_20 = Profile("medical imaging 20 GB", 1, 16384, ("mig", "whole"), 4, 16384)
TRAIN_1 = Profile("training, 1 whole GPU", 1, 81920, ("whole",), 8, 65536)
TRAIN_2 = Profile("training, 2 whole GPUs", 2, 81920, ("whole",), 16, 131072)
TRAIN_40 = Profile("training, 40 GB", 1, 40192, ("mig", "whole"), 6, 49152)
EXPERIMENT_20 = Profile("thesis experiment, 20 GB", 1, 19968, ("mig",), 4, 16384)
NOTEBOOK_10 = Profile("thesis notebook, 10 GB", 1, 9984, ("mig",), 2, 8192)
EVAL_T4 = Profile("thesis evaluation, T4 share", 1, 3840, ("share",), 2, 8192)

# The research group's job mix: (profile, weight, duration range in hours).
RESEARCH_MIX: tuple[tuple[Profile, float, tuple[float, float]], ...] = (
    (TRAIN_1, 0.30, (2.0, 5.0)),
    (TRAIN_2, 0.10, (2.0, 5.0)),
    (TRAIN_40, 0.25, (1.5, 4.0)),
    (EXPERIMENT_20, 0.15, (1.0, 3.0)),
    (NOTEBOOK_10, 0.10, (1.0, 2.5)),
    (EVAL_T4, 0.10, (0.5, 2.0)),
)

# The research group's demand in GPU-equivalents (held + queued, nominal) by hour:
# 8 at the start of the day, all 35 in the evening, back to 8 at its end.
RESEARCH_CURVE: tuple[tuple[float, float], ...] = (
    (8, 8),
    (10, 24),
    (13, 26),
    (17, 26),
    (19, 35),
    (21, 35),
    (22, 8),
)

# Student arrival intensity by hour (relative): morning ramp, class-time peaks, evening tail.
ARRIVAL_CURVE: tuple[tuple[float, float], ...] = (
    (8, 0.2),
    (9, 1.0),
    (11, 1.3),
    (12, 0.7),
    (13, 1.0),
    (14, 1.4),
    (17, 1.2),
    (18, 0.7),
    (20, 0.4),
    (21.5, 0.0),
)


def curve(points: tuple[tuple[float, float], ...], hour: float) -> float:
    if hour <= points[0][0]:
        return points[0][1]
    for (h0, v0), (h1, v1) in zip(points, points[1:], strict=False):
        if h0 <= hour <= h1:
            return v0 + (v1 - v0) * (hour - h0) / (h1 - h0) if h1 > h0 else v1
    return points[-1][1]


@dataclass
class Job:
    """One desktop request as a user would submit it."""

    session_id: int
    user: str
    group: str  # painting | blender | medical | research
    tier: int  # the purpose's tier (1 thesis, 2 coursework, 3 hobby)
    profile: Profile
    submit_s: int  # seconds since midnight
    duration_s: int  # how long it would run if started at once
    expected_s: int  # what the user states (the session's maximum duration)
    patience_s: int  # abandons the queue after this long
    course: str = ""
    booking_id: int | None = None
    department: str = ""


@dataclass
class BookingSpec:
    booking_id: int
    course: str
    seats: int
    profile: Profile
    start_h: float
    end_h: float


DEFAULT_BOOKINGS = (
    BookingSpec(1, "ART-210 3D lab", 20, BLENDER, 14.0, 16.0),
    BookingSpec(2, "MED-330 imaging lab", 12, MEDICAL_20, 15.5, 17.5),
)


@dataclass
class Config:
    seed: int = 42
    start_h: float = 8.0
    end_h: float = 22.0
    cycle_s: int = 30
    painting: int = 40
    blender: int = 25
    medical: int = 15
    researchers: int = 10
    bookings: tuple[BookingSpec, ...] = DEFAULT_BOOKINGS
    research_curve: tuple[tuple[float, float], ...] = RESEARCH_CURVE
    research_mix: tuple[tuple[Profile, float, tuple[float, float]], ...] = RESEARCH_MIX
    arrival_curve: tuple[tuple[float, float], ...] = ARRIVAL_CURVE
    policy: Policy = field(default_factory=Policy)
    layout: tuple[NodeSpec, ...] = DEFAULT_LAYOUT
    # The research group submits a job only when the pool shows a free slice of its shape
    # that nobody queued is waiting for (it keeps its backlog in its own job list).
    research_elastic: bool = True
    event_cycles: bool = True  # also plan after every arrival, departure or grace end
    hobby_retries: int = 2
    retry_s: int = 15 * 60


def _draw_hour(rng: random.Random, points: tuple[tuple[float, float], ...], lo: float, hi: float):
    top = max(v for _, v in points)
    while True:
        h = rng.uniform(lo, hi)
        if rng.random() * top <= curve(points, h):
            return h


def student_jobs(cfg: Config, rng: random.Random, first_id: int) -> list[Job]:
    """The students' requests of the day (the research group's come from its demand curve)."""
    jobs: list[Job] = []
    sid = first_id
    lab_seats = {b.booking_id: b.seats for b in cfg.bookings}
    groups = (
        ("painting", cfg.painting, (30, 120)),
        ("blender", cfg.blender, (45, 180)),
        ("medical", cfg.medical, (60, 240)),
    )
    last = cfg.end_h - 0.5
    for group, count, (lo_min, hi_min) in groups:
        for i in range(count):
            user = f"{group}{i + 1:02d}"
            course = {"painting": "ART-101", "blender": "ART-210", "medical": "MED-330"}[group]
            if group == "painting":
                tier = 3 if i % 2 == 0 else 2
                profile = PAINTING
            elif group == "blender":
                tier, profile = 2, BLENDER
            else:
                tier = 1 if i % 5 in (0, 1) else 2  # 40% write a thesis
                profile = MEDICAL_20 if i % 2 == 0 else MEDICAL_10
            # Lab attendance: the first seats' worth of the lab's course.
            booking = next(
                (
                    b
                    for b in cfg.bookings
                    if b.course.split()[0] == course and i < b.seats and lab_seats[b.booking_id] > 0
                ),
                None,
            )
            visits = rng.choices((1, 2, 3), weights=(0.35, 0.45, 0.20))[0]
            hours = sorted(
                _draw_hour(rng, cfg.arrival_curve, cfg.start_h, last) for _ in range(visits)
            )
            if booking is not None and cfg.start_h <= booking.start_h < cfg.end_h:
                # The lab replaces the visit nearest to it.
                hours = [h for h in hours if abs(h - booking.start_h) > 2.5]
            for h in hours:
                sid += 1
                expected = int(rng.uniform(lo_min, hi_min)) * 60
                jobs.append(
                    Job(
                        sid,
                        user,
                        group,
                        tier,
                        profile,
                        int(h * HOUR),
                        int(expected * rng.uniform(0.5, 1.0)),
                        expected,
                        {3: 20 * 60, 2: 45 * 60, 1: 3 * HOUR}[tier],
                        course=course,
                        department="arts" if group != "medical" else "medicine",
                    )
                )
            if booking is not None and cfg.start_h <= booking.start_h < cfg.end_h:
                sid += 1
                submit = int(booking.start_h * HOUR + rng.uniform(-10, 10) * 60)
                window = int((booking.end_h - booking.start_h) * HOUR)
                end_s = int(booking.end_h * HOUR)
                jobs.append(
                    Job(
                        sid,
                        user,
                        group,
                        2,
                        booking.profile,
                        submit,
                        min(end_s - submit, int(window * rng.uniform(0.8, 1.0))),
                        end_s - submit,
                        end_s - submit,
                        course=booking.course,
                        booking_id=booking.booking_id,
                        department="arts" if group != "medical" else "medicine",
                    )
                )
    jobs.sort(key=lambda j: (j.submit_s, j.session_id))
    return jobs


# -- the simulation -----------------------------------------------------------------------------


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
    notes: set[str] = field(default_factory=set)
    timeline: list[dict] = field(default_factory=list)  # every 15 simulated minutes


def _nominal_milli(pool: Pool, p: Profile) -> int:
    """Milli of the smallest slice in the pool that fits the profile, times its GPU count."""
    fits = [s.milli for s in pool.slices if s.kind in p.kinds and s.memory_mb >= p.memory_min_mb]
    return min(fits) * p.gpu_count if fits else 1000 * p.gpu_count


class CampusDay:
    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.rng = random.Random(cfg.seed)
        self.pool = build_pool(cfg.layout)
        self.res = DayResult(cfg, self.pool)
        self.start_s = int(cfg.start_h * HOUR)
        self.end_s = int(cfg.end_h * HOUR)
        self.t = self.start_s
        self.free: set[int] = {s.slice_id for s in self.pool.slices}
        self.holder: dict[int, int] = {}
        self.held_since: dict[int, int] = {}
        self.held_milli = 0
        self.running: dict[int, Run] = {}
        self.waiting: dict[int, Wait] = {}
        self.episodes: dict[tuple[int, int], Episode] = {}
        self.events: list[tuple[int, int, str, int, int]] = []
        self.seq = 0
        self.usage_cu_s: dict[str, float] = defaultdict(float)
        self.active_users: dict[str, int] = defaultdict(int)
        self.retries: dict[int, int] = defaultdict(int)
        self.nominal = {}
        self.bookings = tuple(
            Booking(
                b.booking_id,
                b.course,
                b.seats,
                self.at(int(b.start_h * HOUR)),
                self.at(int(b.end_h * HOUR)),
                self._request_shape(b.profile, b.course),
            )
            for b in cfg.bookings
        )
        self.next_id = 1
        self.jobs: dict[int, Job] = {}
        for job in student_jobs(cfg, self.rng, 100000):
            self._add_job(job)
        self.research_rng = random.Random(cfg.seed * 7919 + 1)

    # -- helpers --

    @staticmethod
    def at(s: int) -> datetime:
        return DAY + timedelta(seconds=s)

    def _request_shape(self, p: Profile, course: str) -> QueuedRequest:
        return QueuedRequest(
            0, 2, DAY, p.gpu_count, p.memory_min_mb, p.kinds, p.cpus, p.memory_mb, course=course
        )

    def push(self, t: int, kind: str, sid: int, token: int = 0) -> None:
        self.seq += 1
        heapq.heappush(self.events, (t, self.seq, kind, sid, token))

    def _add_job(self, job: Job) -> None:
        self.jobs[job.session_id] = job
        self.nominal[job.session_id] = _nominal_milli(self.pool, job.profile)
        end = min(job.submit_s + job.duration_s, self.end_s)
        if job.submit_s < self.end_s:
            self.res.demand[job.user] += self.nominal[job.session_id] * max(0, end - job.submit_s)
        self.push(job.submit_s, "arrive", job.session_id)

    def tier_of(self, job: Job) -> str:
        return "booked class" if job.booking_id is not None else TIER_NAMES[job.tier]

    def utilisation(self) -> float:
        return self.held_milli / self.pool.capacity_milli

    # -- events --

    def arrive(self, job: Job) -> None:
        if self.active_users[job.user] and job.group != "research":
            self.push(self.t + 600, "arrive", job.session_id)  # one desktop at a time
            return
        block = admission_block(job.tier, self.utilisation(), self.cfg.policy)
        if block and job.booking_id is None:
            self.res.refused += 1
            self.retries[job.session_id] += 1
            if self.retries[job.session_id] <= self.cfg.hobby_retries:
                self.push(self.t + self.cfg.retry_s, "arrive", job.session_id)
            else:
                self.res.refused_requests += 1
            return
        self.active_users[job.user] += 1
        self.enqueue(job, self.at(self.t), job.duration_s, job.expected_s, episode=0)

    def enqueue(
        self, job: Job, submitted_at: datetime, remaining: int, expected: int, episode: int
    ):
        w = Wait(job, submitted_at, self.t, episode, remaining, max(expected, remaining))
        self.waiting[job.session_id] = w
        ep = Episode(job.session_id, job.user, self.tier_of(job), self.t, requeued=episode > 0)
        self.episodes[(job.session_id, episode)] = ep
        self.res.episodes.append(ep)
        self.push(self.t + job.patience_s, "abandon", job.session_id, episode)

    def release(self, run: Run) -> None:
        for s in run.slices:
            assert self.holder.get(s.slice_id) == run.job.session_id, "slice not held by it"
            del self.holder[s.slice_id]
            self.free.add(s.slice_id)
            self.res.holds.append(
                (s.slice_id, run.job.session_id, self.held_since.pop(s.slice_id), self.t)
            )
            self.held_milli -= s.milli
        held = self.t - run.started_s
        self.usage_cu_s[run.job.user] += held * sum(s.compute_units for s in run.slices)
        self.res.received[run.job.user] += self.nominal[run.job.session_id] * held
        del self.running[run.job.session_id]

    def depart(self, sid: int, token: int) -> None:
        run = self.running.get(sid)
        if run is None or run.episode != token or run.end_s != self.t:
            return
        self.release(run)
        self.active_users[run.job.user] -= 1

    def grace_end(self, sid: int, token: int) -> None:
        run = self.running.get(sid)
        if run is None or run.episode != token or run.deadline_s != self.t:
            return
        self.release(run)
        original = run.submitted_at
        self.res.requeues.append(
            {
                "session_id": sid,
                "t": self.t,
                "submitted_at": original.isoformat(),
                "tier": run.job.tier,
            }
        )
        self.enqueue(
            run.job,
            original,
            run.end_s - self.t,
            run.expected_end_s - self.t,
            episode=run.episode + 1,
        )

    def abandon(self, sid: int, token: int) -> None:
        w = self.waiting.get(sid)
        if w is None or w.episode != token:
            return
        del self.waiting[sid]
        self.episodes[(sid, token)].abandoned = True
        self.active_users[w.job.user] -= 1

    # -- the research group --

    def research(self) -> None:
        """The research group tops its jobs up towards the demand curve (then plans).

        Elastic (the default): one job at a time, of a shape that has a spare free slice, and
        only while the last one started at once; a job that has to wait stops the group until
        it starts (the group keeps the rest of its backlog in its own job list).
        """
        cfg = self.cfg
        target = curve(cfg.research_curve, self.t / HOUR) * 1000
        have = sum(
            self.nominal[r] for r, run in self.running.items() if run.job.group == "research"
        )
        have += sum(self.nominal[r] for r, w in self.waiting.items() if w.job.group == "research")
        rng = self.research_rng
        added = False
        while have < target and self.t < self.end_s - HOUR:
            mix = cfg.research_mix
            if cfg.research_elastic:
                if any(w.job.group == "research" for w in self.waiting.values()):
                    break
                spare = self._spare()
                mix = tuple(m for m in mix if spare.get(m[0].name, 0) >= m[0].gpu_count)
                if not mix:
                    break
            profile, _, (lo, hi) = rng.choices(mix, weights=[w for _, w, _ in mix])[0]
            nominal = _nominal_milli(self.pool, profile)
            if have + nominal > target + 500:
                break
            duration = int(rng.uniform(lo, hi) * HOUR)
            user = f"phd{rng.randrange(cfg.researchers) + 1:02d}"
            job = Job(
                self.next_id, user, "research", 1, profile, self.t, duration, duration, 10 * HOUR,
                department="cs",
            )  # fmt: skip
            self.next_id += 1
            self.res.research_jobs += 1
            self.jobs[job.session_id] = job
            self.nominal[job.session_id] = nominal
            self.res.demand[user] += nominal * max(0, min(self.t + duration, self.end_s) - self.t)
            self.active_users[user] += 1
            self.enqueue(job, self.at(self.t), duration, duration, episode=0)
            have += nominal
            added = True
            if cfg.research_elastic:
                self.cycle()  # an arrival: the portal plans at once
                added = False
        if added:
            self.cycle()
        self.res.peak_research_milli = max(
            self.res.peak_research_milli,
            sum(
                s.milli
                for run in self.running.values()
                if run.job.group == "research"
                for s in run.slices
            ),
        )

    def _spare(self) -> dict[str, int]:
        """Per research profile: free slices that fit it, less those the queue will take."""
        free: dict[tuple[str, int], int] = defaultdict(int)
        for x in self.pool.slices:
            if x.slice_id in self.free:
                free[(x.kind, x.memory_mb)] += 1
        types = sorted(free, key=lambda k: (k[1], k[0]))
        for w in self.waiting.values():  # each waiting request takes its smallest fitting type
            p, need = w.job.profile, w.job.profile.gpu_count
            for key in types:
                while need and key[0] in p.kinds and key[1] >= p.memory_min_mb and free[key]:
                    free[key] -= 1
                    need -= 1
        return {
            p.name: sum(n for (k, m), n in free.items() if k in p.kinds and m >= p.memory_min_mb)
            for p, _, _ in self.cfg.research_mix
        }

    # -- one cycle --

    def snapshot(self) -> Snapshot:
        cpus: dict[int, float] = defaultdict(float)
        mem: dict[int, int] = defaultdict(int)
        running = []
        usage = dict(self.usage_cu_s)
        for run in self.running.values():
            cpus[run.node_id] += run.job.profile.cpus
            mem[run.node_id] += run.job.profile.memory_mb
            cu = sum(s.compute_units for s in run.slices)
            usage[run.job.user] = usage.get(run.job.user, 0.0) + cu * (self.t - run.started_s)
            ends = run.deadline_s if run.preempted_for is not None else run.expected_end_s
            running.append(
                RunningSession(
                    run.job.session_id,
                    run.job.tier,
                    run.node_id,
                    run.slices,
                    run.job.profile.cpus,
                    run.job.profile.memory_mb,
                    self.at(run.started_s),
                    self.at(ends),
                    user=run.job.user,
                    course=run.job.course,
                    department=run.job.department,
                    booking_id=run.job.booking_id,
                    preempted_for=run.preempted_for,
                )
            )
        queue = tuple(
            QueuedRequest(
                w.job.session_id,
                w.job.tier,
                w.submitted_at,
                w.job.profile.gpu_count,
                w.job.profile.memory_min_mb,
                w.job.profile.kinds,
                w.job.profile.cpus,
                w.job.profile.memory_mb,
                user=w.job.user,
                course=w.job.course,
                department=w.job.department,
                booking_id=w.job.booking_id,
                duration_s=w.expected_left_s,
                usage_gpu_hours=usage.get(w.job.user, 0.0) / HOUR,
            )
            for w in sorted(self.waiting.values(), key=lambda w: w.job.session_id)
        )
        free = tuple(s for s in self.pool.slices if s.slice_id in self.free)
        return Snapshot(
            nodes=node_states(self.pool, cpus, mem),
            free_slices=free,
            queue=queue,
            running=tuple(running),
            bookings=self.bookings,
            policy=self.cfg.policy,
        )

    def cycle(self) -> None:
        import time

        snap = self.snapshot()
        now = self.at(self.t)
        t0 = time.perf_counter()
        result = plan(snap, now)
        self.res.plan_s += time.perf_counter() - t0
        self.res.cycles += 1
        self.res.notes.update(result.notes)
        by_id = {s.slice_id: s for s in self.pool.slices}
        for p in result.placements:
            w = self.waiting.pop(p.session_id)
            ids = (*p.slice_ids, *(x for _, xs in p.others for x in xs))
            slices = tuple(by_id[x] for x in ids)
            assert len(slices) == w.job.profile.gpu_count, "placement of the wrong size"
            assert len({s.gpu_id for s in slices}) == len(slices), "two slices of one GPU"
            for s in slices:
                assert s.slice_id in self.free, f"slice {s.slice_id} placed while held"
                assert s.kind in w.job.profile.kinds and s.memory_mb >= w.job.profile.memory_min_mb
                self.free.discard(s.slice_id)
                self.holder[s.slice_id] = p.session_id
                self.held_since[s.slice_id] = self.t
                self.held_milli += s.milli
            run = Run(
                w.job,
                p.node_id,
                slices,
                self.t,
                self.t + w.remaining_s,
                self.t + w.expected_left_s,
                w.episode,
                w.submitted_at,
            )
            self.running[p.session_id] = run
            self.push(run.end_s, "depart", p.session_id, w.episode)
            ep = self.episodes[(p.session_id, w.episode)]
            ep.started_s = self.t
            if w.first_eta is not None:
                ep.eta_s = int((w.first_eta - DAY).total_seconds())
        for pre in result.preemptions:
            run = self.running[pre.victim_id]
            assert run.preempted_for is None, "preempted twice"
            run.preempted_for = pre.for_session_id
            run.deadline_s = int((pre.deadline - DAY).total_seconds())
            self.res.preemptions.append(
                {
                    "victim": pre.victim_id,
                    "victim_tier": run.job.tier,
                    "victim_booking": run.job.booking_id,
                    "victim_started_s": run.started_s,
                    "victim_end_s": run.end_s,
                    "for": pre.for_session_id,
                    "t": self.t,
                    "deadline_s": run.deadline_s,
                }
            )
            if run.deadline_s < run.end_s:
                self.push(run.deadline_s, "grace_end", pre.victim_id, run.episode)
        for entry in result.queue:
            w = self.waiting.get(entry.session_id)
            if w is not None and w.first_eta is None and entry.eta is not None:
                w.first_eta = entry.eta

    def sample(self) -> None:
        held: dict[str, int] = defaultdict(int)
        for run in self.running.values():
            held[run.job.group] += sum(s.milli for s in run.slices)
        free: dict[str, int] = defaultdict(int)
        for s in self.pool.slices:
            if s.slice_id in self.free:
                free[f"{s.kind}{s.memory_mb // 1000}"] += 1
        queued: dict[str, int] = defaultdict(int)
        for w in self.waiting.values():
            queued[f"{w.job.group}/{w.job.profile.name}"] += 1
        self.res.timeline.append(
            {
                "t": _hm(self.t / HOUR),
                "held_milli": self.held_milli,
                "held_by_group": dict(sorted(held.items())),
                "free_slices": dict(sorted(free.items())),
                "queued": dict(sorted(queued.items())),
                "grace": sum(1 for r in self.running.values() if r.preempted_for is not None),
            }
        )

    # -- the loop --

    def run(self) -> DayResult:
        import time

        t_wall = time.perf_counter()
        next_tick = self.start_s
        next_sample = self.start_s
        handlers = {
            "arrive": lambda sid, tok: self.arrive(self.jobs[sid]),
            "depart": self.depart,
            "grace_end": self.grace_end,
            "abandon": self.abandon,
        }
        while True:
            t_next = min(next_tick, self.events[0][0] if self.events else next_tick)
            if t_next >= self.end_s:
                break
            t_next = max(t_next, self.t)
            self.res.held_milli_s += self.held_milli * (t_next - self.t)
            self.t = t_next
            trigger = False
            while self.events and self.events[0][0] <= self.t:
                _, _, kind, sid, token = heapq.heappop(self.events)
                if self.events_before_start(kind, sid):
                    continue
                handlers[kind](sid, token)
                trigger = trigger or self.cfg.event_cycles
            if self.t >= next_tick:
                next_tick += self.cfg.cycle_s
                self.cycle()
                self.research()
            elif trigger:
                self.cycle()
            if self.t >= next_sample:
                self.sample()
                next_sample += 15 * 60
        self.res.held_milli_s += self.held_milli * (self.end_s - self.t)
        self.t = self.end_s
        for run in list(self.running.values()):
            self.release(run)
        self.res.span_s = self.end_s - self.start_s
        self.res.wall_s = time.perf_counter() - t_wall
        return self.res

    def events_before_start(self, kind: str, sid: int) -> bool:
        """Arrivals before the day's start are moved to it (the portal queues them overnight)."""
        if kind == "arrive" and self.t < self.start_s:
            self.push(self.start_s, kind, sid)
            return True
        return False


def simulate(cfg: Config | None = None) -> DayResult:
    day = CampusDay(cfg or Config())
    return day.run()


# -- metrics ------------------------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100) of the values, None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def jain(values: list[float]) -> float | None:
    """Jain's fairness index (sum x)^2 / (n sum x^2): 1 when all equal, 1/n when one gets all."""
    if not values:
        return None
    sq = sum(x * x for x in values)
    return (sum(values) ** 2) / (len(values) * sq) if sq else 1.0


def metrics(res: DayResult) -> dict:
    capacity = res.pool.capacity_milli
    util = res.held_milli_s / (capacity * res.span_s) if res.span_s else 0.0
    tiers = {}
    for name in TIERS:
        eps = [e for e in res.episodes if e.tier == name]
        waits = [e.started_s - e.enqueued_s for e in eps if e.started_s is not None]
        tiers[name] = {
            "requests": len({e.session_id for e in eps}),
            "queue_entries": len(eps),
            "started": len(waits),
            "wait_p50_s": percentile(waits, 50),
            "wait_p95_s": percentile(waits, 95),
            "abandoned": sum(1 for e in eps if e.abandoned),
            "still_waiting": sum(1 for e in eps if e.started_s is None and not e.abandoned),
        }
    ratios = [
        min(1.0, res.received.get(u, 0.0) / d) for u, d in sorted(res.demand.items()) if d > 0
    ]
    eta_err = [
        abs(e.started_s - e.eta_s) for e in res.episodes if e.eta_s is not None and e.started_s
    ]
    return {
        "seed": res.config.seed,
        "window": f"{_hm(res.config.start_h)}-{_hm(res.config.end_h)}",
        "cycle_s": res.config.cycle_s,
        "booking_hold_horizon_s": res.config.policy.booking_hold_horizon_s,
        "research_elastic": res.config.research_elastic,
        "gpus": res.pool.gpus,
        "capacity_milli": capacity,
        "utilisation_milli": round(util * 1000),
        "tiers": tiers,
        "preemptions": len(res.preemptions),
        "jain": jain(ratios),
        "users": len(ratios),
        "refused_attempts": res.refused,
        "refused_requests": res.refused_requests,
        "abandoned": sum(1 for e in res.episodes if e.abandoned),
        "eta_error_p50_s": percentile(eta_err, 50),
        "research_jobs": res.research_jobs,
        "peak_research_milli": res.peak_research_milli,
        "cycles": res.cycles,
        "plan_s": round(res.plan_s, 2),
        "wall_s": round(res.wall_s, 2),
        "notes": sorted(res.notes)[:5],
        "timeline": res.timeline,
    }


def _hm(h: float) -> str:
    return f"{int(h):02d}:{int(round((h - int(h)) * 60)):02d}"


def _fmt_s(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:.0f} s" if v < 120 else f"{v / 60:.1f} min"


def format_table(m: dict) -> str:
    lines = [
        f"campus day {m['window']} UTC, seed {m['seed']}, cycle {m['cycle_s']} s: "
        f"{m['gpus']} GPUs, capacity {m['capacity_milli']} milli; booking hold horizon "
        f"{m['booking_hold_horizon_s']} s, research "
        f"{'elastic' if m['research_elastic'] else 'eager'}",
        f"utilisation (time-averaged, held / capacity)  {m['utilisation_milli']} milli",
        "",
        f"{'tier':<13} {'requests':>8} {'started':>8} {'wait p50':>9} {'wait p95':>9} "
        f"{'abandoned':>9} {'waiting':>8}",
    ]
    for name, t in m["tiers"].items():
        lines.append(
            f"{name:<13} {t['requests']:>8} {t['started']:>8} {_fmt_s(t['wait_p50_s']):>9} "
            f"{_fmt_s(t['wait_p95_s']):>9} {t['abandoned']:>9} {t['still_waiting']:>8}"
        )
    jain_text = "-" if m["jain"] is None else f"{m['jain']:.3f}"
    lines += [
        "",
        f"preemptions {m['preemptions']}   Jain's fairness {jain_text} over {m['users']} users   "
        f"refused {m['refused_requests']} requests ({m['refused_attempts']} attempts)   "
        f"abandoned {m['abandoned']}",
        f"research jobs {m['research_jobs']}, peak research hold {m['peak_research_milli']} milli; "
        f"{m['cycles']} plan() calls, {m['plan_s']} s in plan(), {m['wall_s']} s wall",
    ]
    return "\n".join(lines)


def main(args) -> int:
    policy = Policy()
    if args.hold_horizon is not None:
        policy = replace(policy, booking_hold_horizon_s=args.hold_horizon)
    cfg = Config(
        seed=args.seed,
        cycle_s=args.cycle,
        start_h=args.start,
        end_h=args.end,
        policy=policy,
        research_elastic=not args.research_eager,
    )
    res = simulate(cfg)
    m = metrics(res)
    print(format_table(m))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(m, f, indent=2)
    return 0


def add_parser(sub) -> None:
    cp = sub.add_parser("campus", help="one campus day on the demo pool, through the engine")
    cp.add_argument("--seed", type=int, default=42)
    cp.add_argument("--cycle", type=int, default=30, help="seconds between scheduling cycles")
    cp.add_argument("--start", type=float, default=8.0, help="hour the day starts")
    cp.add_argument("--end", type=float, default=22.0, help="hour the day ends")
    cp.add_argument("--json", default=None, help="write the metrics as JSON here")
    cp.add_argument(
        "--hold-horizon",
        type=int,
        default=None,
        help="Policy.booking_hold_horizon_s (default: the engine's Policy default)",
    )
    cp.add_argument(
        "--research-eager",
        action="store_true",
        help="the research group submits up to its curve without looking at the pool",
    )
