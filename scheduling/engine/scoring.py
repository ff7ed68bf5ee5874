"""Fragmentation-aware placement scores over plain node/GPU state (no Django, no I/O).

The functions here look at one node at a time: its GPU model, CPU left and the milli-GPU left on
each GPU (1000 = a free GPU). They are the scoring half of the ``deskpool`` placement policy of
the trace simulator (``scheduling.sim``) and are meant to be reused by the portal's engine.

Score of placing a pod on a node (higher is better)::

    score = primary(F_before - F_after) * 1e6 + tie

``F`` is FGD's node fragmentation: the expected idle GPU milli of the node that a task of the
target workload cannot use (CPU exhaustion strands all idle GPUs for a task). ``primary`` is
FGD's ``int(100 * sigmoid(delta / 1000))``: measured on the openb trace, the unrounded delta
(``levels=0``) is much worse (7.2% vs 4.9% unallocated on the default trace) -- coarse levels
with the random node order as tie-break generalise better. ``tie`` only orders equal levels:

- ``-break_penalty`` when a fractional pod would break a fully free node (keeps whole nodes for
  multi-GPU pods), ``-gpu_penalty`` when it would open a free GPU on a node where a used GPU
  fits (smaller, so a used node still beats a free node);
- ``-tight_weight * (gpu_left - gpu_milli) / 1000``: tightest fitting GPU;
- optional: ``pack_weight * used fraction`` (prefer used nodes), ``whole_penalty`` (whole-GPU
  pods breaking a free node), ``fine_weight * delta``, ``demand_mix`` (weight target shapes by
  GPU demand instead of pod count). All default to 0: each measured neutral or worse.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

MILLI = 1000


@dataclass(frozen=True)
class TargetShape:
    """One shape of the target workload: ``num_gpu`` x ``gpu_milli`` (0 GPUs = CPU-only)."""

    cpu_milli: int
    gpu_milli: int
    num_gpu: int
    allowed_models: frozenset[str] | None  # None = any model
    weight: float  # relative weight, need not be normalised


@dataclass(frozen=True)
class Weights:
    """Tie-break weights (milli-GPU units), small next to typical fragmentation deltas."""

    break_penalty: float = 30.0
    pack_weight: float = 0.0
    tight_weight: float = 1.0
    demand_mix: float = 0.0  # 0 = weight shapes by pod count (FGD), 1 = by GPU demand
    levels: int = 100  # primary = int(levels * sigmoid(delta / 1000)); 0 = unrounded delta
    fine_weight: float = 0.0  # unrounded delta added to the tie-break
    whole_penalty: float = 0.0  # break_penalty for whole-GPU pods
    gpu_penalty: float = 15.0  # fractional pod opening a free GPU when a used one fits
    strand_weight: float = 5.0  # tie: -w * growth of CPU-stranded idle GPUs (in GPUs)
    strand_primary: float = 0.5  # the same growth (milli-GPU) subtracted from the delta
    cpu_pack: float = 0.0  # tie for CPU-only pods: -w * idle GPUs of the node
    scarcity: float = 100.0  # tie for GPU pods: -w * constrained-demand pressure on the model
    scarcity_primary: float = 0.3  # pressure * GPU request * w subtracted from the delta


def primary(delta: float, levels: int) -> float:
    """The fragmentation-delta key: FGD's rounded sigmoid (``levels`` steps) or raw delta."""
    if not levels:
        return delta
    x = -delta / 1000.0
    if x > 700:
        return 0.0
    return float(int(levels / (1.0 + math.exp(x))))


def combine(delta: float, tie: float, w: Weights) -> float:
    if not w.levels:
        return delta + tie
    return primary(delta, w.levels) * 1.0e6 + tie + w.fine_weight * delta


def target_shapes(
    shapes: Iterable[tuple[int, int, int, frozenset[str] | None, float]],
    demand_mix: float = 0.0,
) -> list[TargetShape]:
    """Target shapes from ``(cpu, gpu_milli, num_gpu, allowed, probability)`` tuples.

    The weight mixes the pod-count probability with the GPU-demand share
    (``p * num_gpu * gpu_milli``, normalised; CPU-only shapes keep their count weight).
    """
    rows = list(shapes)
    total_p = sum(r[4] for r in rows) or 1.0
    demand = [r[4] * r[2] * r[1] for r in rows]
    total_d = sum(demand) or 1.0
    out = []
    for r, d in zip(rows, demand, strict=True):
        p = r[4] / total_p
        w = (1.0 - demand_mix) * p + demand_mix * (d / total_d if r[1] else p)
        out.append(TargetShape(r[0], r[1], r[2], r[3], w))
    total_w = sum(s.weight for s in out) or 1.0
    return [TargetShape(s.cpu_milli, s.gpu_milli, s.num_gpu, s.allowed_models, s.weight / total_w)
            for s in out]  # fmt: skip


class FragmentationModel:
    """``F(model, cpu_left, lefts)``: expected idle GPU milli a target task cannot use.

    ``lefts`` must be sorted (it is the memo key). For a task of k GPUs x g milli: all idle milli
    is fragment if the task is CPU-only, the model is not allowed, CPU left < task CPU, or fewer
    than k GPUs have >= g left; otherwise only the GPUs with < g left count.
    """

    def __init__(self, shapes: Sequence[TargetShape]):
        self.types = [(s.weight, s.cpu_milli, s.gpu_milli, s.num_gpu, s.allowed_models)
                      for s in shapes]  # fmt: skip
        self.memo: dict[tuple, float] = {}

    def __call__(self, model: str, cpu_left: int, lefts: tuple[int, ...]) -> float:
        key = (model, cpu_left, lefts)
        got = self.memo.get(key)
        if got is not None:
            return got
        total = sum(lefts)
        frag = 0.0
        if total:
            usable: dict[int, tuple[int, int]] = {}
            for p, c, g, k, allowed in self.types:
                if g == 0 or (allowed is not None and model not in allowed) or cpu_left < c:
                    frag += p * total
                    continue
                u = usable.get(g)
                if u is None:
                    n_fit = sum(1 for v in lefts if v >= g)
                    u = usable[g] = (n_fit, sum(v for v in lefts if v < g))
                frag += p * (u[1] if u[0] >= k else total)
        self.memo[key] = frag
        return frag


def strand_growth(
    idle: float, taken: float, cpu_left: float, cpu_after: float, cpu_per_gpu: float
) -> float:
    """Growth of the node's idle GPU milli that its CPU can no longer serve.

    ``cpu_per_gpu`` is the workload's milli-CPU per whole GPU of demand (0 = unknown, no
    stranding): a node keeps ``cpu_left / cpu_per_gpu`` GPUs' worth of CPU, and idle GPU milli
    above that is stranded. Placing ``taken`` milli-GPU with ``cpu_left - cpu_after`` CPU may
    strand more (a CPU-heavy pod on a GPU-rich node) or less.
    """
    if cpu_per_gpu <= 0:
        return 0.0
    per_cpu = MILLI / cpu_per_gpu
    return max(0.0, idle - taken - cpu_after * per_cpu) - max(0.0, idle - cpu_left * per_cpu)


class WorkloadMix:
    """What the scheduler learns about its demand: CPU per GPU, and per-model pressure.

    ``add`` one request (CPU milli, GPU milli requested in all, allowed models or None); then
    ``cpu_per_gpu()`` and ``pressure(capacity)``, where ``capacity`` maps each GPU model to the
    pool's milli of it. A model's pressure is the share of all GPU demand that can only go to
    a constrained set including it, relative to that set's share of capacity: demand that
    must go to scarce models makes them worth keeping free for it. The trace simulator feeds
    it the arrivals so far; the portal's planner the queue, bookings and running sessions.
    """

    def __init__(self) -> None:
        self.cpu = 0.0
        self.gpu = 0.0
        self.constrained: dict[frozenset[str], float] = {}

    def add(self, cpu_milli: float, gpu_request: float, allowed: frozenset[str] | None) -> None:
        if not gpu_request:
            return
        self.cpu += cpu_milli
        self.gpu += gpu_request
        if allowed:
            self.constrained[allowed] = self.constrained.get(allowed, 0) + gpu_request

    def cpu_per_gpu(self) -> float:
        return self.cpu * MILLI / self.gpu if self.gpu else 0.0

    def pressure(self, capacity: dict[str, float]) -> dict[str, float]:
        total = sum(capacity.values())
        out = dict.fromkeys(capacity, 0.0)
        if not self.gpu:
            return out
        for allowed, demand in self.constrained.items():
            models = [m for m in allowed if m in capacity]
            room = sum(capacity[m] for m in models)
            for m in models:
                out[m] += demand * total / (self.gpu * room)
        return out


def score_placement(
    frag: FragmentationModel,
    model: str,
    cpu_left: int,
    state: tuple[int, ...],
    cpu_milli: int,
    num_gpu: int,
    gpu_milli: int,
    weights: Weights = Weights(),
    cpu_per_gpu: float = 0.0,
    pressure: float = 0.0,
) -> tuple[float, int | None]:
    """Score of a pod (``num_gpu`` x ``gpu_milli``, ``cpu_milli``) on a node in ``state``.

    ``state`` = sorted milli left per GPU; the pod must fit (checked by the caller). Returns
    ``(score, gpu_value)``: for a fractional pod ``gpu_value`` is the milli-left value of the GPU
    to use (tightest among the best), else None. ``cpu_per_gpu`` (milli-CPU per whole GPU of
    the workload's GPU demand, learned from arrivals; 0 = unknown) drives the stranding terms.
    """
    w = weights
    before = frag(model, cpu_left, state)
    cpu_after = cpu_left - cpu_milli
    n = len(state)
    idle = sum(state)
    used = n * MILLI - idle
    pack = w.pack_weight * (used / (n * MILLI)) if n else 0.0
    strand = strand_growth(idle, num_gpu * gpu_milli, cpu_left, cpu_after, cpu_per_gpu)
    pack -= w.strand_weight * strand / MILLI
    if num_gpu == 0:
        pack -= w.cpu_pack * idle / MILLI
        delta = before - frag(model, cpu_after, state) - w.strand_primary * strand
        return combine(delta, pack, w), None
    before -= w.strand_primary * strand + w.scarcity_primary * pressure * num_gpu * gpu_milli
    pack -= w.scarcity * pressure
    if num_gpu == 1 and gpu_milli < MILLI:
        node_pen = w.break_penalty if used == 0 else 0.0  # breaking a fully free node
        best, best_v = None, None
        has_used_fit = any(gpu_milli <= v < MILLI for v in state)
        for v in sorted(set(state)):
            if v < gpu_milli:
                continue
            after = list(state)
            after[after.index(v)] = v - gpu_milli
            delta = before - frag(model, cpu_after, tuple(sorted(after)))
            tie = pack - node_pen - w.tight_weight * (v - gpu_milli) / MILLI
            if v == MILLI and has_used_fit:
                tie -= w.gpu_penalty  # breaking a free GPU when a used one fits
            s = combine(delta, tie, w)
            if best is None or s > best:
                best, best_v = s, v
        assert best is not None
        return best, best_v
    after = list(state)
    for _ in range(num_gpu):
        after[after.index(MILLI)] = 0
    delta = before - frag(model, cpu_after, tuple(sorted(after)))
    tie = pack - (w.whole_penalty if used == 0 and num_gpu < n else 0.0)
    return combine(delta, tie, w), None
