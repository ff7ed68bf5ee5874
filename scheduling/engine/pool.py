"""The pool during one planning cycle: what is left, and what fits where.

A :class:`Cycle` is built from the snapshot at the start of :func:`scheduling.engine.plan`
and shrinks as the plan holds and places: CPU and RAM per node, free slices per node
(:class:`NodeSlices`), milli-GPU left per GPU, rack power headroom; each placement adds one
to its node's start backlog (``Cycle.pending``). Requests are reduced to a
:class:`Shape` (everything feasibility and the score depend on), so requests of one shape share
the caches of :mod:`scheduling.engine.placement`: whenever a node's capacity changes,
:meth:`Cycle.touch` bumps its version and records it as changed.

Feasibility of one slice for a shape is :meth:`Cycle.fits` (kind, GPU memory, GPU model,
compute units, the largest slice a quota allows); slices of GPUs at or above the temperature
limit are kept apart in ``Cycle.hot`` and never offered.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from .model import (
    WHOLE,
    Booking,
    FreeSlice,
    NodeState,
    Policy,
    QueuedRequest,
    Snapshot,
    expected_duration_s,
)
from .quotas import index_quotas, largest_slice_mb
from .scoring import FragmentationModel
from .workload import target_shapes, workload_mix


def _slice_key(s: FreeSlice) -> tuple[int, int, int]:
    return (s.memory_mb, s.gpu_id, s.slice_id)


class NodeSlices:
    """One node's usable free slices by kind, each list sorted by ``(memory, gpu, id)``."""

    __slots__ = ("by_kind", "memory")

    def __init__(self, slices: Iterable[FreeSlice]) -> None:
        grouped: dict[str, list[FreeSlice]] = defaultdict(list)
        for s in slices:
            grouped[s.kind].append(s)
        self.by_kind: dict[str, list[FreeSlice]] = {}
        self.memory: dict[str, list[int]] = {}
        for kind, group in grouped.items():
            group.sort(key=_slice_key)
            self.by_kind[kind] = group
            self.memory[kind] = [s.memory_mb for s in group]

    def all(self) -> list[FreeSlice]:
        return [s for group in self.by_kind.values() for s in group]

    def fitting(self, kinds: tuple[str, ...], memory_min: int) -> list[FreeSlice]:
        parts = []
        for kind in kinds:
            group = self.by_kind.get(kind)
            if group:
                start = bisect_left(self.memory[kind], memory_min)
                if start < len(group):
                    parts.append(group[start:])
        if len(parts) == 1:
            return parts[0]
        merged = [s for part in parts for s in part]
        merged.sort(key=_slice_key)
        return merged

    def take(self, slice_ids: set[int]) -> None:
        for kind, group in self.by_kind.items():
            if any(s.slice_id in slice_ids for s in group):
                kept = [s for s in group if s.slice_id not in slice_ids]
                self.by_kind[kind] = kept
                self.memory[kind] = [s.memory_mb for s in kept]


@dataclass(frozen=True)
class Shape:
    """What feasibility and score depend on; requests of one shape share cached node scores."""

    gpu_count: int
    memory_min: int
    kinds: tuple[str, ...]
    cpus: float
    memory_mb: int
    models: frozenset[str]
    compute_min: float
    memory_max: int | None  # largest slice a quota allows
    heavy: bool
    multi_node: bool
    plain: bool = False  # no model, compute or largest-slice constraint


@dataclass
class Hold:
    """Capacity held for one seat of a booking (taken out of the pool until used)."""

    booking: Booking
    node_id: int
    slices: tuple[FreeSlice, ...]
    cpus: float
    memory_mb: int


@dataclass
class Candidate:
    """A scored place for a shape: a node and the slices it would take there."""

    score: float
    node_id: int
    slices: tuple[FreeSlice, ...]


@dataclass
class Cycle:
    snapshot: Snapshot
    now: datetime
    policy: Policy = field(init=False)

    def __post_init__(self) -> None:
        snap = self.snapshot
        self.policy = snap.policy
        self.nodes: dict[int, NodeState] = {n.node_id: n for n in snap.nodes}
        self.order: list[int] = sorted(n.node_id for n in snap.nodes if n.healthy)
        self.position = {node_id: i for i, node_id in enumerate(self.order)}
        self.cpus = {n.node_id: n.cpus_free for n in snap.nodes}
        self.memory = {n.node_id: n.memory_free_mb for n in snap.nodes}
        # Desktops waiting for the node's agent to start them: the snapshot's, plus every
        # placement of this cycle (``take``), so later requests of the cycle see earlier ones.
        self.pending = {n.node_id: n.pending_starts for n in snap.nodes}
        self.rack_headroom = {r.name: r.budget_w - r.draw_w for r in snap.racks}
        self.rack_budget = {r.name: r.budget_w for r in snap.racks}
        self.stopped_racks = frozenset(r.name for r in snap.racks if r.stopped)
        limit = self.policy.temperature_limit_c
        usable: dict[int, list[FreeSlice]] = defaultdict(list)
        self.hot: list[FreeSlice] = []
        self.lefts: dict[int, dict[int, int]] = defaultdict(lambda: defaultdict(int))
        models: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        for s in snap.free_slices:
            if s.node_id not in self.position:
                continue
            self.lefts[s.node_id][s.gpu_id] += s.milli
            models[s.node_id][s.gpu_model] += 1
            if s.temperature_c is not None and s.temperature_c >= limit:
                self.hot.append(s)
            elif self.nodes[s.node_id].rack not in self.stopped_racks:
                usable[s.node_id].append(s)
        for r in snap.running:
            for s in r.slices:
                models[s.node_id][s.gpu_model] += 1
                self.lefts[s.node_id].setdefault(s.gpu_id, 0)
        self.node_model = {
            node_id: max(counts, key=lambda m: (counts[m], m)) for node_id, counts in models.items()
        }
        self.slices = {node_id: NodeSlices(usable.get(node_id, ())) for node_id in self.order}
        self.bookings = {b.booking_id: b for b in snap.bookings}
        self.quotas = index_quotas(snap.quotas)
        self.extra_sessions: dict[tuple[str, str], int] = defaultdict(int)
        self.holds: dict[int, list[Hold]] = defaultdict(list)  # booking id -> its holds
        shapes = snap.workload or target_shapes(snap)
        self.frag = FragmentationModel(shapes)
        self.cpu_per_gpu, self.pressure = workload_mix(snap, shapes)
        # Caches of scheduling.engine.placement (per shape, invalidated through ``version``).
        self.changes: list[int] = []
        self.cache: dict[Shape, list] = {}
        self.nowhere: set[Shape] = set()
        self.static_fit: dict[Shape, bool] = {}
        self.sigs: dict[int, int] = {}
        self.free_gpus: dict[int, int] = {}
        self.sig_ids: dict[tuple, int] = {}
        self.score_memo: dict[Shape, dict[int, float]] = defaultdict(dict)
        self.candidates: dict[tuple[Shape, int], tuple[int, Candidate]] = {}
        self.shapes: dict[int, Shape] = {}  # id() of a request of the snapshot -> its shape
        self.version: dict[int, int] = defaultdict(int)  # bumped whenever a node is touched
        self.rack_nodes: dict[str, list[int]] = defaultdict(list)
        for node_id in self.order:
            self.rack_nodes[self.nodes[node_id].rack].append(node_id)
        every = list(snap.free_slices) + [s for r in snap.running for s in r.slices]
        # Slices of healthy nodes by what ``fits`` looks at, so shapes are matched per type.
        self.types: dict[tuple, list[FreeSlice]] = defaultdict(list)
        for x in every:
            if x.node_id in self.position:
                self.types[(x.kind, x.memory_mb, x.gpu_model, x.compute_units)].append(x)
        self.free_by_id = {s.slice_id: s for s in snap.free_slices}
        # Per one-GPU shape: the first free slice (in node order) smaller than a whole GPU that
        # could take it (None: none is free). Capacity only shrinks within a cycle, so a scan
        # goes on from the last one found; ``give_back`` clears it.
        self.smaller: dict[Shape, FreeSlice | None] = {}
        self.kept: dict[Shape, bool] = {}  # smaller_free when the shape's scores were cached

    # -- shapes and feasibility --

    def shape_of(self, r: QueuedRequest) -> Shape:
        """The request's placement shape (cached per request object for the cycle)."""
        shape = self.shapes.get(id(r))
        if shape is None:
            shape = self.shapes[id(r)] = self._shape_of(r)
        return shape

    def _shape_of(self, r: QueuedRequest) -> Shape:
        memory_max = largest_slice_mb(self.quotas, r)
        heavy = (
            r.gpu_count > 0
            and r.allowed_kinds == ("whole",)
            and expected_duration_s(r, self.policy) >= self.policy.heavy_duration_s
        )
        return Shape(
            r.gpu_count,
            r.gpu_memory_min_mb,
            tuple(dict.fromkeys(r.allowed_kinds)),
            r.cpus,
            r.memory_mb,
            frozenset(r.gpu_models),
            r.compute_min,
            memory_max,
            heavy,
            r.multi_node,
            not r.gpu_models and not r.compute_min and memory_max is None,
        )

    def usable(self, shape: Shape, s: FreeSlice) -> bool:
        """The model, compute and largest-slice checks (kind and memory are the caller's)."""
        if shape.plain:
            return True
        if shape.models and s.gpu_model not in shape.models:
            return False
        if s.compute_units < shape.compute_min:
            return False
        return shape.memory_max is None or s.memory_mb <= shape.memory_max

    def matching(self, shape: Shape) -> list[FreeSlice]:
        """Every slice of a healthy node (free or busy) that could serve the shape."""
        out: list[FreeSlice] = []
        for (kind, memory, _, _), group in self.types.items():
            if kind in shape.kinds and memory >= shape.memory_min and self.usable(shape, group[0]):
                out.extend(group)
        return out

    def fits(self, shape: Shape, s: FreeSlice) -> bool:
        """Kind, memory and the usable checks: could this slice serve the shape?"""
        return s.kind in shape.kinds and s.memory_mb >= shape.memory_min and self.usable(shape, s)

    def per_gpu(self, shape: Shape, node_id: int) -> list[FreeSlice]:
        """For each GPU with a usable fitting slice, its smallest one (by milli, memory)."""
        best: dict[int, FreeSlice] = {}
        for s in self.slices[node_id].fitting(shape.kinds, shape.memory_min):
            if not self.usable(shape, s):
                continue
            cur = best.get(s.gpu_id)
            if cur is None or (s.milli, s.memory_mb, s.slice_id) < (
                cur.milli,
                cur.memory_mb,
                cur.slice_id,
            ):
                best[s.gpu_id] = s
        return sorted(best.values(), key=lambda s: (s.milli, s.memory_mb, s.gpu_id))

    def smaller_free(self, shape: Shape) -> bool:
        """Is a fitting slice of a kind other than a whole GPU (a MIG instance, a share) free
        now on a node that could take the one-GPU shape (CPU, memory, rack power)? Then a
        whole GPU loses to it (``placement.evaluate``): whole GPUs are kept for work that
        needs them. False for shapes that allow only whole GPUs or no whole GPU."""
        if shape.gpu_count != 1 or WHOLE not in shape.kinds or len(shape.kinds) < 2:
            return False
        start = 0
        if shape in self.smaller:
            known = self.smaller[shape]
            if known is None or self._could_take(shape, known):
                return known is not None
            # Nodes before the last one found had none, and capacity only shrinks.
            start = self.position[known.node_id]
        kinds = tuple(k for k in shape.kinds if k != WHOLE)
        found = None
        for node_id in self.order[start:]:
            for s in self.slices[node_id].fitting(kinds, shape.memory_min):
                if self.usable(shape, s) and self._could_take(shape, s):
                    found = s
                    break
            if found is not None:
                break
        self.smaller[shape] = found
        return found is not None

    def _could_take(self, shape: Shape, s: FreeSlice) -> bool:
        """The slice is still free and its node has the shape's CPU, memory and power."""
        n = s.node_id
        return (
            self.cpus[n] >= shape.cpus
            and self.memory[n] >= shape.memory_mb
            and s in self.slices[n].by_kind.get(s.kind, ())
            and self.power_ok(self.nodes[n], (s,))
        )

    def power_ok(self, node: NodeState, slices: Sequence[FreeSlice]) -> bool:
        """The slices' added draw fits the rack's power headroom (racks without a budget: yes)."""
        if node.rack in self.stopped_racks:
            return False
        if node.rack not in self.rack_headroom:
            return True
        return sum(s.power_w for s in slices) <= self.rack_headroom[node.rack]

    def free_gpu_count(self, node_id: int) -> int:
        """GPUs of the node with any usable free slice (an upper bound on what fits)."""
        n = self.free_gpus.get(node_id)
        if n is None:
            groups = self.slices[node_id].by_kind.values()
            n = self.free_gpus[node_id] = len({x.gpu_id for group in groups for x in group})
        return n

    def signature(self, node_id: int) -> int:
        """Everything a node's score depends on (its start backlog included), so identical
        nodes are scored once per shape.

        Nodes with NVLink (whose GPU ids matter) are their own signature.
        """
        sig = self.sigs.get(node_id)
        if sig is None:
            node = self.nodes[node_id]
            per_gpu: dict[int, list[tuple]] = defaultdict(list)
            for x in self.slices[node_id].all():
                per_gpu[x.gpu_id].append(
                    (
                        x.kind,
                        x.memory_mb,
                        x.milli,
                        x.compute_units,
                        x.gpu_model,
                        # None and a reading sort apart (a GPU may report no temperature)
                        x.temperature_c is None,
                        x.temperature_c or 0.0,
                        x.power_w,
                    )  # fmt: skip
                )
            lefts = self.lefts[node_id]
            gpus = tuple(sorted((lefts[g], tuple(sorted(per_gpu.get(g, ())))) for g in lefts))
            full = (
                node_id if node.nvlink else None,
                self.cpus[node_id],
                self.memory[node_id],
                self.node_model.get(node_id, ""),
                node.high_power,
                self.rack_headroom.get(node.rack),
                self.rack_budget.get(node.rack),
                self.pending[node_id],
                gpus,
            )
            sig = self.sig_ids.setdefault(full, len(self.sig_ids))
            self.sigs[node_id] = sig
        return sig

    # -- changing what is left --

    def touch(self, node_id: int) -> None:
        """The node's free capacity changed: re-score it (and its rack, if power-budgeted)."""
        self.sigs.pop(node_id, None)
        self.free_gpus.pop(node_id, None)
        self.changes.append(node_id)
        self.version[node_id] += 1
        rack = self.nodes[node_id].rack
        if rack in self.rack_budget:
            for other in self.rack_nodes[rack]:
                if other != node_id:
                    self.sigs.pop(other, None)
                    self.version[other] += 1
                    self.changes.append(other)

    def take(
        self,
        node_id: int,
        slices: Sequence[FreeSlice],
        cpus: float,
        memory_mb: int,
        *,
        start: bool = True,
    ) -> None:
        """Slices, CPU and RAM of the node leave the pool: a placement (a desktop to start
        there, ``start``) or a booking's hold (``start=False``: nothing starts yet)."""
        if start:
            self.pending[node_id] += 1
        self.cpus[node_id] -= cpus
        self.memory[node_id] -= memory_mb
        if slices:
            self.slices[node_id].take({s.slice_id for s in slices})
            for s in slices:
                self.lefts[node_id][s.gpu_id] -= s.milli
            rack = self.nodes[node_id].rack
            if rack in self.rack_headroom:
                self.rack_headroom[rack] -= sum(s.power_w for s in slices)
        self.touch(node_id)

    def give_back(self, node_id: int, slices: Sequence[FreeSlice]) -> None:
        """Free slices come back to the node (the unused part of a hold; no touch here)."""
        self.slices[node_id] = NodeSlices(self.slices[node_id].all() + list(slices))
        for s in slices:
            self.lefts[node_id][s.gpu_id] += s.milli
        self.nowhere.clear()  # capacity came back
        self.smaller.clear()
