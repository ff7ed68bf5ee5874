"""One simulated campus day on the demo pool, driven by the engine (``scheduling.engine.plan``).

``python -m scheduling.sim campus [--seed 42] [--cycle 30] [--json PATH]``; see ``docs/campus.md``.

Modules: :mod:`.pool` (the demo fleet's nodes and slices), :mod:`.workload` (profiles, demand
curves, bookings, :class:`Config`), :mod:`.state` (running and waiting sessions, the result),
:mod:`.portal` (the snapshot the portal's cycle would build, and its checks at submit),
:mod:`.day` (:class:`CampusDay`: events, the research group, applying each plan),
:mod:`.report` (metrics and the printed table), :mod:`.cli` (the command).

Pure Python, deterministic per seed, no Django.
"""

from .cli import add_parser, main
from .day import CampusDay, simulate
from .pool import (
    A100,
    DEFAULT_LAYOUT,
    DEMO_MIG,
    MEDIUM_MIG,
    MIG_MEMORY_MB,
    T4,
    WHOLE,
    GpuLayout,
    NodeSpec,
    Pool,
    build_pool,
    mig_instances,
    node_states,
)
from .portal import Portal
from .report import format_table, jain, metrics, percentile
from .state import DAY, TIERS, DayResult, Episode, Run, Wait
from .workload import (
    ARRIVAL_CURVE,
    BLENDER,
    CATALOGUE,
    DEFAULT_BOOKINGS,
    EVAL_T4,
    EXPERIMENT_20,
    HOUR,
    MEDICAL_10,
    MEDICAL_20,
    NOTEBOOK_10,
    PAINTING,
    RESEARCH_CURVE,
    RESEARCH_MIX,
    TRAIN_1,
    TRAIN_2,
    TRAIN_40,
    BookingSpec,
    Config,
    Job,
    Profile,
    curve,
    student_jobs,
)

__all__ = [
    "A100",
    "ARRIVAL_CURVE",
    "BLENDER",
    "CATALOGUE",
    "DAY",
    "DEFAULT_BOOKINGS",
    "DEFAULT_LAYOUT",
    "DEMO_MIG",
    "EVAL_T4",
    "EXPERIMENT_20",
    "HOUR",
    "MEDICAL_10",
    "MEDICAL_20",
    "MEDIUM_MIG",
    "MIG_MEMORY_MB",
    "NOTEBOOK_10",
    "PAINTING",
    "RESEARCH_CURVE",
    "RESEARCH_MIX",
    "T4",
    "TIERS",
    "TRAIN_1",
    "TRAIN_2",
    "TRAIN_40",
    "WHOLE",
    "BookingSpec",
    "CampusDay",
    "Config",
    "DayResult",
    "Episode",
    "GpuLayout",
    "Job",
    "NodeSpec",
    "Pool",
    "Portal",
    "Profile",
    "Run",
    "Wait",
    "add_parser",
    "build_pool",
    "curve",
    "format_table",
    "jain",
    "main",
    "metrics",
    "mig_instances",
    "node_states",
    "percentile",
    "simulate",
    "student_jobs",
]
