"""The target workload of the fragmentation score, and the figures learned from it.

The portal passes its catalogue's mix in ``Snapshot.workload`` (active profiles weighted by
recent requests); without it the mix is the queue's and the bookings' requests. From the mix
come the two learned-demand figures of :class:`scheduling.engine.scoring.WorkloadMix`: CPU per
GPU of the demand and the pressure on each GPU model (the same figures the trace simulator's
``deskpool`` policy learns from arrivals).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from .model import Snapshot
from .scoring import MILLI, TargetShape, WorkloadMix


def _slice_types(snapshot: Snapshot) -> set[tuple[str, int, int]]:
    """(kind, memory, milli) of every slice of the pool, free or busy."""
    types = {(s.kind, s.memory_mb, s.milli) for s in snapshot.free_slices}
    busy = (s for r in snapshot.running for s in r.slices)
    types |= {(s.kind, s.memory_mb, s.milli) for s in busy}
    return types


def _typical_milli(
    types: set[tuple[str, int, int]], memory_min: int, kinds: tuple[str, ...]
) -> int:
    """Milli of the smallest slice kind in the pool that fits (1000 if none is seen)."""
    best = None
    for s in types:
        if s[0] in kinds and s[1] >= memory_min and (best is None or s[2] < best):
            best = s[2]
    return best if best is not None else MILLI


def target_shapes(snapshot: Snapshot) -> list[TargetShape]:
    """The queue's and the bookings' mix (a booking counts once per seat), normalised."""
    types: set[tuple[str, int, int]] | None = None
    counts: dict[tuple, float] = defaultdict(float)
    requests = [(r, 1.0) for r in snapshot.queue] + [(b.shape, b.seats) for b in snapshot.bookings]
    for r, weight in requests:
        milli = 0
        if r.gpu_count:
            if types is None:
                types = _slice_types(snapshot)
            milli = _typical_milli(types, r.gpu_memory_min_mb, r.allowed_kinds)
        counts[(int(r.cpus * 1000), milli, r.gpu_count, frozenset(r.gpu_models) or None)] += weight
    total = sum(counts.values()) or 1.0
    return [TargetShape(k[0], k[1], k[2], k[3], w / total) for k, w in sorted(
        counts.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2], sorted(kv[0][3] or ()))
    )]  # fmt: skip


def workload_mix(
    snapshot: Snapshot, shapes: Sequence[TargetShape]
) -> tuple[float, dict[str, float]]:
    """CPU per GPU and per-model pressure of the target workload, against the pool's GPUs."""
    mix = WorkloadMix()
    for t in shapes:
        mix.add(t.weight * t.cpu_milli, t.weight * t.num_gpu * t.gpu_milli, t.allowed_models)
    every = list(snapshot.free_slices) + [s for r in snapshot.running for s in r.slices]
    gpus = {(s.node_id, s.gpu_id): s.gpu_model for s in every}
    capacity: dict[str, float] = defaultdict(float)
    for model in gpus.values():
        capacity[model] += MILLI
    return mix.cpu_per_gpu(), mix.pressure(dict(capacity))
