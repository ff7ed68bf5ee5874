"""Is a MIG layout that a node reports one the tables allow? :func:`check_layout`.

A node reports each MIG device of a GPU with its profile and, where NVML tells it, the memory
slice its GPU instance starts at. The layout is refused (the GPU takes no work, the portal
says why) when the GPU model has no table, a profile is not in the model's table, a profile
appears more often than the GPU allows, the instances need more media engines than the GPU
has, an instance sits where its profile may not start, two instances overlap, or instances
without a reported start cannot all be fitted into the memory slices left.

Pure Python: no Django import here (``scheduling.services.mig_layout`` applies it).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from .mig import GpuMigTable, MigProfile, UnknownGpuModel, table_for

__all__ = ["LayoutProblem", "Problem", "ReportedInstance", "check_layout"]


class Problem:
    """The codes of a refused layout (the portal turns them into sentences)."""

    UNKNOWN_MODEL = "unknown_model"
    UNKNOWN_PROFILE = "unknown_profile"
    TOO_MANY = "too_many"
    ENGINES = "engines"
    BAD_START = "bad_start"
    OVERLAP = "overlap"
    NO_ROOM = "no_room"


@dataclass(frozen=True)
class ReportedInstance:
    """One MIG device as reported: its profile and its GPU instance's start (None: unknown)."""

    profile: str
    start: int | None = None


@dataclass(frozen=True)
class LayoutProblem:
    """Why a layout is refused: a :class:`Problem` code and the profile it concerns."""

    code: str
    profile: str = ""
    start: int | None = None


def check_layout(model_name: str, instances: Sequence[ReportedInstance]) -> LayoutProblem | None:
    """None when ``instances`` can exist together on a ``model_name`` GPU in MIG mode."""
    try:
        table = table_for(model_name)
    except UnknownGpuModel:
        return LayoutProblem(Problem.UNKNOWN_MODEL)
    known = set(table.profile_names)
    for inst in instances:
        if _name(inst.profile) not in known:
            return LayoutProblem(Problem.UNKNOWN_PROFILE, inst.profile)
    profiles = [table.profile(_name(i.profile)) for i in instances]
    for name, count in sorted(Counter(p.name for p in profiles).items()):
        if count > table.profile(name).max_count:
            return LayoutProblem(Problem.TOO_MANY, name)
    if not _engines_fit(table, profiles):
        return LayoutProblem(Problem.ENGINES)
    taken: set[int] = set()
    for inst, p in sorted(
        ((i, p) for i, p in zip(instances, profiles, strict=True) if i.start is not None),
        key=lambda pair: (pair[0].start or 0, pair[1].name),
    ):
        assert inst.start is not None
        if inst.start not in p.placements:
            return LayoutProblem(Problem.BAD_START, p.name, inst.start)
        span = set(p.span(inst.start))
        if taken & span:
            return LayoutProblem(Problem.OVERLAP, p.name, inst.start)
        taken |= span
    unplaced = [p for i, p in zip(instances, profiles, strict=True) if i.start is None]
    if not _fit_all(sorted(unplaced, key=lambda p: -p.memory_slices), taken):
        return LayoutProblem(Problem.NO_ROOM)
    return None


def _name(profile: str) -> str:
    return profile.removeprefix("MIG ").strip()


def _engines_fit(table: GpuMigTable, profiles: Sequence[MigProfile]) -> bool:
    """Media engines are not shared: the instances' sum is at most the whole GPU's."""
    full = table.full_profile
    return (
        sum(p.nvdec for p in profiles) <= full.nvdec
        and sum(p.nvjpg for p in profiles) <= full.nvjpg
        and sum(p.ofa for p in profiles) <= full.ofa
    )


def _fit_all(profiles: Sequence[MigProfile], taken: set[int]) -> bool:
    """Whether every profile finds a start among the free slices (a small backtracking
    search: at most 7 instances, at most 7 starts each)."""
    if not profiles:
        return True
    first, rest = profiles[0], profiles[1:]
    for start in first.placements:
        span = set(first.span(start))
        if not taken & span and _fit_all(rest, taken | span):
            return True
    return False
