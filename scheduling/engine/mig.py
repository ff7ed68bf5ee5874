"""MIG (Multi-Instance GPU) profile tables and placement rules.

The tables are data, one module per model under ``scheduling.engine.mig_tables``, each
citing its source. NVIDIA's placement model (NVML ``nvmlGpuInstancePlacement_t``): a GPU
instance placed at ``start`` occupies memory slices ``[start, start + size)`` and can't be
created if it overlaps an occupied slice. On A100/H100/H200, 7g profiles take all 8 memory
slices and 3g/4g profiles take 4, so memory slices (not compute slices) decide what fits.

Pure Python: no Django import here.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from .mig_tables import ALL_TABLES

__all__ = [
    "GpuMigTable",
    "MigProfile",
    "PlacedInstance",
    "UnknownGpuModel",
    "all_tables",
    "can_place",
    "enumerate_partitions",
    "free_placements",
    "occupied_slices",
    "table_for",
    "validate_layout",
]


class UnknownGpuModel(KeyError):
    """Raised when no MIG table matches a GPU model name."""


@dataclass(frozen=True)
class MigProfile:
    name: str
    profile_id: int
    compute_slices: int
    memory_slices: int
    memory_fraction: str
    sm_fraction: str
    l2_fraction: str
    copy_engines: int
    nvdec: int
    nvjpg: int
    ofa: int
    max_count: int
    placements: tuple[int, ...]

    @property
    def media_extensions(self) -> bool:
        return self.name.endswith("+me")

    def span(self, start: int) -> range:
        """Memory slices occupied when placed at ``start``."""
        return range(start, start + self.memory_slices)


@dataclass(frozen=True)
class GpuMigTable:
    key: str
    model: str
    aliases: tuple[str, ...]
    total_memory_gb: int
    memory_slices: int
    compute_slices: int
    profiles: tuple[MigProfile, ...]
    sources: tuple[Mapping[str, str], ...]
    notes: tuple[str, ...] = field(default=())

    def profile(self, name: str) -> MigProfile:
        wanted = name.removeprefix("MIG ").strip()
        for p in self.profiles:
            if p.name == wanted:
                return p
        raise KeyError(f"{self.model} has no MIG profile {name!r}")

    @property
    def profile_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.profiles)

    @property
    def full_profile(self) -> MigProfile:
        """The whole-GPU profile (7g / 4g on A30); its engines are the GPU's budget."""
        return max(self.profiles, key=lambda p: (p.compute_slices, p.memory_slices))


@dataclass(frozen=True, order=True)
class PlacedInstance:
    start: int
    profile: str


def _build(raw: Mapping[str, Any]) -> GpuMigTable:
    profiles = tuple(
        MigProfile(**{**p, "placements": tuple(p["placements"])}) for p in raw["profiles"]
    )
    table = GpuMigTable(
        key=raw["key"],
        model=raw["model"],
        aliases=tuple(raw["aliases"]),
        total_memory_gb=raw["total_memory_gb"],
        memory_slices=raw["memory_slices"],
        compute_slices=raw["compute_slices"],
        profiles=profiles,
        sources=tuple(raw["sources"]),
        notes=tuple(raw.get("notes", ())),
    )
    for p in profiles:
        for s in p.placements:
            if s < 0 or s + p.memory_slices > table.memory_slices:
                raise ValueError(f"{table.key}: {p.name} at {s} exceeds the memory slices")
    return table


_TABLES: dict[str, GpuMigTable] = {t.key: t for t in (_build(raw) for raw in ALL_TABLES)}


def all_tables() -> tuple[GpuMigTable, ...]:
    return tuple(_TABLES.values())


def _norm(name: str) -> str:
    s = name.upper().replace("NVIDIA", " ")
    s = re.sub(r"[^A-Z0-9]+", " ", s)
    return f" {' '.join(s.split())} "


def table_for(model_name: str) -> GpuMigTable:
    """The MIG table for an NVML device name or a table key.

    Accepts e.g. "NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB PCIe", "NVIDIA H100 80GB HBM3",
    "NVIDIA H100 PCIe", "NVIDIA H200", "NVIDIA A30", or "a100-40gb".
    """
    if model_name.strip().lower() in _TABLES:
        return _TABLES[model_name.strip().lower()]
    n = _norm(model_name)
    key: str | None = None
    if " A30 " in n or " A30 24GB " in n:
        key = "a30-24gb"
    elif " A100 " in n:
        if " 80GB " in n:
            key = "a100-80gb"
        elif " 40GB " in n:
            key = "a100-40gb"
    elif " H100 " in n:
        # H100 NVL (94GB) and H100 96GB (GH200) have other profiles: not covered.
        other = any(tok in n for tok in (" NVL ", " 94GB ", " 96GB ", " GH200 "))
        if not other and (" 80GB " in n or " PCIE " in n or n.strip() == "H100"):
            key = "h100-80gb"
    elif " H200 " in n and " GH200 " not in n:
        key = "h200-141gb"
    if key is None:
        raise UnknownGpuModel(model_name)
    return _TABLES[key]


def _as_instances(table: GpuMigTable, existing: Iterable[Any]) -> list[PlacedInstance]:
    out: list[PlacedInstance] = []
    for item in existing:
        if isinstance(item, PlacedInstance):
            out.append(item)
        elif isinstance(item, tuple) and len(item) == 2:
            a, b = item
            out.append(
                PlacedInstance(start=b, profile=a)
                if isinstance(a, str)
                else PlacedInstance(start=a, profile=b)
            )
        else:
            raise TypeError(f"not an instance: {item!r}")
    for inst in out:
        table.profile(inst.profile)
    return out


def occupied_slices(table: GpuMigTable, existing: Iterable[Any]) -> set[int]:
    """Memory slices taken by ``existing`` instances ((profile, start) or PlacedInstance)."""
    taken: set[int] = set()
    for inst in _as_instances(table, existing):
        taken.update(table.profile(inst.profile).span(inst.start))
    return taken


def _engines_fit(table: GpuMigTable, profiles: Iterable[MigProfile]) -> bool:
    # Derived rule: media engines can't be shared, so the instances' NVDEC/NVJPG/OFA
    # counts can't exceed the whole-GPU profile's (e.g. only one instance gets the OFA).
    full = table.full_profile
    dec = jpg = ofa = 0
    for p in profiles:
        dec += p.nvdec
        jpg += p.nvjpg
        ofa += p.ofa
    return dec <= full.nvdec and jpg <= full.nvjpg and ofa <= full.ofa


def _fits(
    table: GpuMigTable, placed: list[PlacedInstance], taken: set[int], p: MigProfile, start: int
) -> bool:
    if start not in p.placements or taken.intersection(p.span(start)):
        return False
    if sum(1 for i in placed if i.profile == p.name) >= p.max_count:
        return False
    return _engines_fit(table, [*(table.profile(i.profile) for i in placed), p])


def free_placements(table: GpuMigTable, occupied: Iterable[Any]) -> dict[str, list[int]]:
    """Start positions still valid for each profile.

    ``occupied`` is either a set of occupied memory-slice indexes (only overlap is checked)
    or existing instances as ``(profile, start)`` / ``PlacedInstance`` (overlap, per-profile
    max count and the media-engine budget are checked).
    """
    items = list(occupied)
    if all(isinstance(i, int) for i in items):
        taken = set(items)
        return {
            p.name: [s for s in p.placements if not taken.intersection(p.span(s))]
            for p in table.profiles
        }
    placed = _as_instances(table, items)
    taken = occupied_slices(table, placed)
    return {
        p.name: [s for s in p.placements if _fits(table, placed, taken, p, s)]
        for p in table.profiles
    }


def can_place(table: GpuMigTable, existing: Iterable[Any], profile: str) -> int | None:
    """A valid start for ``profile`` next to ``existing`` instances, or None.

    Best fit: of the valid starts, the one that leaves the most placements free for later
    instances (ties: lowest start). Plain first-fit paints itself into corners, e.g. a
    3g at 0 on an A100 leaves slice 7 reachable only by 2-slice profiles.
    """
    p = table.profile(profile)
    placed = _as_instances(table, existing)
    taken = occupied_slices(table, placed)
    best: tuple[int, int] | None = None
    for s in p.placements:
        if not _fits(table, placed, taken, p, s):
            continue
        after = [*placed, PlacedInstance(s, p.name)]
        left = sum(len(v) for v in free_placements(table, after).values())
        if best is None or left > best[0]:
            best = (left, s)
    return None if best is None else best[1]


def validate_layout(table: GpuMigTable, instances: Iterable[Any]) -> bool:
    """Whether instances could all exist together (placed one by one, any order)."""
    placed: list[PlacedInstance] = []
    taken: set[int] = set()
    for inst in sorted(_as_instances(table, instances)):
        p = table.profile(inst.profile)
        if not _fits(table, placed, taken, p, inst.start):
            return False
        placed.append(inst)
        taken.update(p.span(inst.start))
    return True


def enumerate_partitions(
    table: GpuMigTable, *, include_media: bool = True
) -> Iterator[tuple[PlacedInstance, ...]]:
    """Yield every maximal valid layout (no further instance fits), each once, sorted."""
    profiles = [p for p in table.profiles if include_media or not p.media_extensions]
    seen: set[tuple[PlacedInstance, ...]] = set()

    def options(placed: list[PlacedInstance], taken: set[int]) -> list[PlacedInstance]:
        return [
            PlacedInstance(s, p.name)
            for p in profiles
            for s in p.placements
            if _fits(table, placed, taken, p, s)
        ]

    def walk(placed: list[PlacedInstance], taken: set[int]) -> Iterator[tuple[PlacedInstance, ...]]:
        state = tuple(sorted(placed))
        if state in seen:
            return
        seen.add(state)
        nxt = options(placed, taken)
        if not nxt:
            yield state
            return
        for inst in nxt:
            p = table.profile(inst.profile)
            yield from walk([*placed, inst], taken | set(p.span(inst.start)))

    yield from walk([], set())
