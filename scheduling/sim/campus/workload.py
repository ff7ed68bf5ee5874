"""The campus day's workload: profiles, the groups' demand curves, bookings and the config.

Students arrive by an intensity curve, the research group follows its demand curve (see
:mod:`.day`), two class bookings take labs; every figure is in ``docs/campus.md``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from scheduling.engine import Policy, Quota

from .pool import DEFAULT_LAYOUT, NodeSpec

HOUR = 3600


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


# The desktop catalogue, in the order the portal lists it (its ``workload`` mix follows it).
CATALOGUE: tuple[Profile, ...] = (
    PAINTING,
    BLENDER,
    MEDICAL_10,
    MEDICAL_20,
    TRAIN_1,
    TRAIN_2,
    TRAIN_40,
    EXPERIMENT_20,
    NOTEBOOK_10,
    EVAL_T4,
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
    hobby_retries: int = 2  # a refused submission is tried again this often
    retry_s: int = 15 * 60
    # Quota rows as an admin enters them (only scope, key and the limits count; ``*`` is every
    # member of the scope without a row of their own). None by default.
    quotas: tuple[Quota, ...] = ()
    # Power budgets of racks (the ``rack_power_budget_w`` label); the demo fleet has none.
    rack_budgets_w: tuple[tuple[str, float], ...] = ()


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
