"""The scheduling engine: ``plan(snapshot, now) -> Plan``. Pure Python, deterministic.

One cycle, in this order:

1. **Order.** Effective tier first: a request for a class booking inside its window is tier 0,
   then thesis (1), coursework (2), hobby (3). Within a tier, fair share plus aging: the key is
   ``usage_gpu_hours * aging_s_per_gpu_hour - waited_s`` (less recent usage and longer waits
   go first), then submission time and id, so the order is total and the plan deterministic.
2. **Holds.** Every booking that starts within the hold horizon and has not ended holds
   capacity for its seats not yet running: the placement score picks the slices, which leave
   the general pool. A booked request takes its booking's hold first. Anyone else may
   *backfill* a hold only if they end (now + expected duration) before the booking starts.
3. **Placement**, request by request. Feasibility: node healthy, CPU and RAM headroom, slice
   kind allowed, GPU memory, GPU model, compute units, GPU below the temperature limit, rack
   power headroom, quotas (concurrent sessions, GPU-hours this week, largest slice) of the
   user, the course and the department. Among feasible nodes the best score wins (ties: lowest
   node id). The score is the fragmentation gradient of :mod:`scheduling.engine.scoring` (the
   same model and weights as the simulator's ``deskpool`` policy), with tie-breaks that avoid
   hot GPUs and racks near their power budget, prefer NVLink-connected GPU sets, and steer
   long whole-GPU work to high-power racks. Multi-GPU requests are all-or-nothing: distinct
   GPUs of one node, or (``multi_node``) nodes of one network plane.
4. **Preemption.** A booked, thesis or coursework request that still cannot start may preempt
   running sessions of a lower tier: hobby before coursework, never thesis, never a booked
   class, never a session inside its protected runtime. On each node the fewest victims that
   free enough are chosen with the least lost work (runtime x GPU share); the node with the
   cheapest set wins. Victims get the grace period; the request waits for them.
5. **Queue.** Every request left waiting gets a position (blocked requests get none), a reason
   a person can read, and an estimated start from the expected ends of running sessions and
   the queue ahead (see :func:`_estimate`).

Speed: per request *shape* (everything the feasibility and score depend on) the score of
every node is cached and only nodes changed since are re-scored, so a request costs a C-speed
``max`` over the node list; free capacity only shrinks within a cycle, so a shape that fitted
nowhere fits nowhere later in the cycle.
"""

from __future__ import annotations

import gc
import heapq
from bisect import bisect_left
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from .model import (
    TIER_BOOKED,
    TIER_NAMES,
    TIER_THESIS,
    Alert,
    Booking,
    FreeSlice,
    NodeState,
    Placement,
    Plan,
    Policy,
    Preemption,
    QueuedRequest,
    QueueEntry,
    Quota,
    RunningSession,
    Snapshot,
)
from .scoring import (
    MILLI,
    FragmentationModel,
    TargetShape,
    Weights,
    WorkloadMix,
    combine,
    strand_growth,
)

WEIGHTS = Weights()  # the deskpool policy's weights, shared with the simulator
TEMPERATURE_WEIGHT = 2.0  # tie units per degree above TEMPERATURE_SOFT_C
TEMPERATURE_SOFT_C = 60.0
RACK_WEIGHT = 40.0  # tie units at a rack drawing its whole budget (from 80% of it)
NVLINK_WEIGHT = 50.0  # tie units for a fully NVLink-connected GPU set
HEAVY_WEIGHT = 40.0  # long whole-GPU work on a high-power rack (and light work off it)
NEG = float("-inf")


def tier_name(tier: int) -> str:
    return TIER_NAMES.get(tier, f"tier {tier}")


def expected_duration_s(request: QueuedRequest, policy: Policy) -> int:
    return request.duration_s or policy.default_duration_s


def in_window(booking: Booking, now: datetime) -> bool:
    return booking.starts_at <= now < booking.ends_at


def effective_tier(request_tier: int, booking: Booking | None, now: datetime) -> int:
    """Tier 0 for a booked class inside its window; else the purpose's tier."""
    if booking is not None and in_window(booking, now):
        return TIER_BOOKED
    return request_tier


def order_key(request: QueuedRequest, tier: int, now: datetime, policy: Policy) -> tuple:
    waited = (now - request.submitted_at).total_seconds()
    share = request.usage_gpu_hours * policy.aging_s_per_gpu_hour - waited
    return (tier, share, request.submitted_at, request.session_id)


# -- quotas and admission (also used by the portal at submit) ----------------------------------

QUOTA_NOUN = {"user": "your", "course": "the course's", "department": "the department's"}


def _scopes(r: QueuedRequest) -> tuple[tuple[str, str], ...]:
    return (("user", r.user), ("course", r.course), ("department", r.department))


def quota_for(quotas: dict[tuple[str, str], Quota], scope: str, key: str) -> Quota | None:
    if not key:
        return None
    return quotas.get((scope, key)) or quotas.get((scope, "*"))


def index_quotas(quotas: Iterable[Quota]) -> dict[tuple[str, str], Quota]:
    return {(q.scope, q.key): q for q in quotas}


def count_session(
    request: QueuedRequest,
    quotas: dict[tuple[str, str], Quota],
    extra_sessions: dict[tuple[str, str], int],
) -> None:
    """Count a session just placed for ``request`` against each quota that covers it."""
    for scope, key in _scopes(request):
        quota = quota_for(quotas, scope, key)
        if quota is not None:
            extra_sessions[(scope, quota.key)] = extra_sessions.get((scope, quota.key), 0) + 1


def quota_block(
    request: QueuedRequest,
    quotas: dict[tuple[str, str], Quota],
    extra_sessions: dict[tuple[str, str], int] | None = None,
    *,
    starting: bool = True,
) -> str | None:
    """Why a quota stops this request now, or None. ``starting``: it would take a session."""
    extra = extra_sessions or {}
    for scope, key in _scopes(request):
        quota = quota_for(quotas, scope, key)
        if quota is None:
            continue
        whose = QUOTA_NOUN[scope] if scope == "user" else f"{scope} {key}'s"
        if (
            quota.max_slice_memory_mb is not None
            and request.gpu_memory_min_mb > quota.max_slice_memory_mb
        ):
            return (
                f"blocked: {whose} largest slice is {quota.max_slice_memory_mb} MB of GPU "
                f"memory; this profile needs {request.gpu_memory_min_mb} MB"
            )
        if (
            quota.max_gpu_hours_week is not None
            and request.gpu_count > 0
            and quota.gpu_hours_week >= quota.max_gpu_hours_week
        ):
            return (
                f"blocked: {whose} quota of {quota.max_gpu_hours_week:g} GPU-hours this "
                f"week is used ({quota.gpu_hours_week:.1f} used)"
            )
        if quota.max_sessions is not None and starting:
            held = quota.sessions + extra.get((scope, quota.key), 0)
            if held >= quota.max_sessions:
                return (
                    f"blocked: {whose} quota of {quota.max_sessions} concurrent desktops is in "
                    "use; one must end before this one starts"
                )
    return None


def utilisation(free: Iterable[FreeSlice], held: Iterable[FreeSlice]) -> float:
    """Share of the pool's GPU capacity (milli) held by sessions."""
    free_milli = sum(s.milli for s in free)
    held_milli = sum(s.milli for s in held)
    total = free_milli + held_milli
    return held_milli / total if total else 0.0


def admission_block(tier: int, pool_utilisation: float, policy: Policy) -> str | None:
    """Why a new request of this tier is refused at submit, or None (only hobby is refused)."""
    if tier >= 3 and pool_utilisation >= policy.block_utilisation:
        return (
            f"The pool is {pool_utilisation:.0%} busy, above the "
            f"{policy.block_utilisation:.0%} limit for hobby desktops. Try again later, "
            "or ask for thesis or coursework if that is what it is for."
        )
    return None


def alert_for(pool_utilisation: float, policy: Policy) -> Alert:
    if pool_utilisation >= policy.block_utilisation:
        return Alert(
            "block",
            pool_utilisation,
            f"pool at {pool_utilisation:.0%}: above the block threshold "
            f"({policy.block_utilisation:.0%}); new hobby requests are refused",
        )
    if pool_utilisation >= policy.warn_utilisation:
        return Alert(
            "warn",
            pool_utilisation,
            f"pool at {pool_utilisation:.0%}: above the warning threshold "
            f"({policy.warn_utilisation:.0%})",
        )
    return Alert("ok", pool_utilisation, f"pool at {pool_utilisation:.0%}")


# -- the per-cycle pool -------------------------------------------------------------------------


def _slice_key(s: FreeSlice) -> tuple[int, int, int]:
    return (s.memory_mb, s.gpu_id, s.slice_id)


class _NodeSlices:
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
class _Shape:
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
class _Hold:
    booking: Booking
    node_id: int
    slices: tuple[FreeSlice, ...]
    cpus: float
    memory_mb: int


@dataclass
class _Candidate:
    score: float
    node_id: int
    slices: tuple[FreeSlice, ...]


@dataclass
class _Cycle:
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
        self.rack_headroom = {r.name: r.budget_w - r.draw_w for r in snap.racks}
        self.rack_budget = {r.name: r.budget_w for r in snap.racks}
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
            else:
                usable[s.node_id].append(s)
        for r in snap.running:
            for s in r.slices:
                models[s.node_id][s.gpu_model] += 1
                self.lefts[s.node_id].setdefault(s.gpu_id, 0)
        self.node_model = {
            node_id: max(counts, key=lambda m: (counts[m], m)) for node_id, counts in models.items()
        }
        self.slices = {node_id: _NodeSlices(usable.get(node_id, ())) for node_id in self.order}
        self.bookings = {b.booking_id: b for b in snap.bookings}
        self.quotas = index_quotas(snap.quotas)
        self.extra_sessions: dict[tuple[str, str], int] = defaultdict(int)
        self.holds: dict[int, list[_Hold]] = defaultdict(list)
        shapes = snap.workload or self._target_shapes()
        self.frag = FragmentationModel(shapes)
        self.cpu_per_gpu, self.pressure = self._workload_mix(shapes)
        self.changes: list[int] = []
        self.cache: dict[_Shape, list] = {}
        self.nowhere: set[_Shape] = set()
        self.static_fit: dict[_Shape, bool] = {}
        self.sigs: dict[int, int] = {}
        self.free_gpus: dict[int, int] = {}
        self.sig_ids: dict[tuple, int] = {}
        self.score_memo: dict[_Shape, dict[int, float]] = defaultdict(dict)
        self.candidates: dict[tuple[_Shape, int], tuple[int, _Candidate]] = {}
        self.shapes: dict[int, _Shape] = {}  # id() of a request of the snapshot -> its shape
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

    # -- the target workload for the fragmentation model --

    def _typical_milli(self, memory_min: int, kinds: tuple[str, ...]) -> int:
        """Milli of the smallest slice kind in the pool that fits (1000 if none is seen)."""
        best = None
        for s in self._slice_types():
            if s[0] in kinds and s[1] >= memory_min and (best is None or s[2] < best):
                best = s[2]
        return best if best is not None else MILLI

    def _slice_types(self) -> set[tuple[str, int, int]]:
        cached = getattr(self, "_types", None)
        if cached is None:
            cached = {(s.kind, s.memory_mb, s.milli) for s in self.snapshot.free_slices}
            busy = (s for r in self.snapshot.running for s in r.slices)
            cached |= {(s.kind, s.memory_mb, s.milli) for s in busy}
            self._types = cached
        return cached

    def _workload_mix(self, shapes: Sequence[TargetShape]) -> tuple[float, dict[str, float]]:
        """CPU per GPU and per-model pressure of the target workload (the portal's recent
        requests by profile, else the queue's and bookings' mix): the figures the trace
        simulator's ``deskpool`` learns from arrivals."""
        mix = WorkloadMix()
        for t in shapes:
            mix.add(t.weight * t.cpu_milli, t.weight * t.num_gpu * t.gpu_milli, t.allowed_models)
        every = list(self.snapshot.free_slices) + [
            s for r in self.snapshot.running for s in r.slices
        ]
        gpus = {(s.node_id, s.gpu_id): s.gpu_model for s in every}
        capacity: dict[str, float] = defaultdict(float)
        for model in gpus.values():
            capacity[model] += MILLI
        return mix.cpu_per_gpu(), mix.pressure(dict(capacity))

    def _mix_terms(
        self, model: str, idle: int, taken: int, cpu: int, cpu_after: int
    ) -> tuple[float, float]:
        """(delta, tie) corrections of the learned-demand terms, as in ``score_placement``."""
        w = WEIGHTS
        strand = strand_growth(idle, taken, cpu, cpu_after, self.cpu_per_gpu)
        pressure = self.pressure.get(model, 0.0) if taken else 0.0
        delta = w.strand_primary * strand + w.scarcity_primary * pressure * taken
        return delta, w.strand_weight * strand / MILLI + w.scarcity * pressure

    def _target_shapes(self) -> list[TargetShape]:
        counts: dict[tuple, float] = defaultdict(float)
        for r in self.snapshot.queue:
            milli = self._typical_milli(r.gpu_memory_min_mb, r.allowed_kinds) if r.gpu_count else 0
            models = frozenset(r.gpu_models) or None
            counts[(int(r.cpus * 1000), milli, r.gpu_count, models)] += 1.0
        for b in self.snapshot.bookings:
            r = b.shape
            milli = self._typical_milli(r.gpu_memory_min_mb, r.allowed_kinds) if r.gpu_count else 0
            counts[(int(r.cpus * 1000), milli, r.gpu_count, frozenset(r.gpu_models) or None)] += (
                b.seats
            )
        total = sum(counts.values()) or 1.0
        return [TargetShape(k[0], k[1], k[2], k[3], w / total) for k, w in sorted(
            counts.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2], sorted(kv[0][3] or ()))
        )]  # fmt: skip

    # -- feasibility and score on one node --

    def shape_of(self, r: QueuedRequest) -> _Shape:
        """The request's placement shape (cached per request object for the cycle)."""
        shape = self.shapes.get(id(r))
        if shape is None:
            shape = self.shapes[id(r)] = self._shape_of(r)
        return shape

    def _shape_of(self, r: QueuedRequest) -> _Shape:
        memory_max = None
        for scope, key in _scopes(r):
            q = quota_for(self.quotas, scope, key)
            if q is not None and q.max_slice_memory_mb is not None:
                memory_max = min(memory_max or q.max_slice_memory_mb, q.max_slice_memory_mb)
        heavy = (
            r.gpu_count > 0
            and r.allowed_kinds == ("whole",)
            and expected_duration_s(r, self.policy) >= self.policy.heavy_duration_s
        )
        return _Shape(
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

    def _usable(self, shape: _Shape, s: FreeSlice) -> bool:
        if shape.plain:
            return True
        if shape.models and s.gpu_model not in shape.models:
            return False
        if s.compute_units < shape.compute_min:
            return False
        return shape.memory_max is None or s.memory_mb <= shape.memory_max

    def matching(self, shape: _Shape) -> list[FreeSlice]:
        """Every slice of a healthy node (free or busy) that could serve the shape."""
        out: list[FreeSlice] = []
        for (kind, memory, _, _), group in self.types.items():
            if kind in shape.kinds and memory >= shape.memory_min and self._usable(shape, group[0]):
                out.extend(group)
        return out

    def fits(self, shape: _Shape, s: FreeSlice) -> bool:
        """Kind, memory and the usable checks: could this slice serve the shape?"""
        return s.kind in shape.kinds and s.memory_mb >= shape.memory_min and self._usable(shape, s)

    def per_gpu(self, shape: _Shape, node_id: int) -> list[FreeSlice]:
        """For each GPU with a usable fitting slice, its smallest one (by milli, memory)."""
        best: dict[int, FreeSlice] = {}
        for s in self.slices[node_id].fitting(shape.kinds, shape.memory_min):
            if not self._usable(shape, s):
                continue
            cur = best.get(s.gpu_id)
            if cur is None or (s.milli, s.memory_mb, s.slice_id) < (
                cur.milli,
                cur.memory_mb,
                cur.slice_id,
            ):
                best[s.gpu_id] = s
        return sorted(best.values(), key=lambda s: (s.milli, s.memory_mb, s.gpu_id))

    def _power_ok(self, node: NodeState, slices: Sequence[FreeSlice]) -> bool:
        if node.rack not in self.rack_headroom:
            return True
        return sum(s.power_w for s in slices) <= self.rack_headroom[node.rack]

    def _tie_common(self, node: NodeState, shape: _Shape, slices: Sequence[FreeSlice]) -> float:
        tie = 0.0
        for s in slices:
            if s.temperature_c is not None and s.temperature_c > TEMPERATURE_SOFT_C:
                tie -= TEMPERATURE_WEIGHT * (s.temperature_c - TEMPERATURE_SOFT_C)
        budget = self.rack_budget.get(node.rack)
        if budget:
            used = 1.0 - self.rack_headroom[node.rack] / budget
            if used > 0.8:
                tie -= RACK_WEIGHT * (used - 0.8) / 0.2
        if shape.heavy:
            tie += HEAVY_WEIGHT if node.high_power else 0.0
        elif node.high_power and shape.gpu_count:
            tie -= HEAVY_WEIGHT / 4
        return tie

    def evaluate(self, shape: _Shape, node_id: int) -> _Candidate | None:
        node = self.nodes[node_id]
        cpu_left = self.cpus[node_id]
        if cpu_left < shape.cpus or self.memory[node_id] < shape.memory_mb:
            return None
        model = self.node_model.get(node_id, "")
        lefts = self.lefts[node_id]
        state = tuple(sorted(lefts.values()))
        cpu_milli_left = int(cpu_left * 1000)
        cpu_after = int((cpu_left - shape.cpus) * 1000)
        before = self.frag(model, cpu_milli_left, state)
        idle = sum(state)
        if shape.gpu_count == 0:
            fix, tie_fix = self._mix_terms(model, idle, 0, cpu_milli_left, cpu_after)
            delta = before - self.frag(model, cpu_after, state) - fix
            tie = self._tie_common(node, shape, ()) - tie_fix
            return _Candidate(combine(delta, tie, WEIGHTS), node_id, ())
        options = self.per_gpu(shape, node_id)
        if len(options) < shape.gpu_count:
            return None
        w = WEIGHTS
        if shape.gpu_count == 1:
            node_free = bool(state) and all(v >= MILLI for v in state)
            has_used_fit = any(lefts[s.gpu_id] < MILLI for s in options)
            best: _Candidate | None = None
            seen: set[tuple] = set()
            for s in options:
                v = lefts[s.gpu_id]
                same = (v, s.milli, s.memory_mb, s.temperature_c, s.power_w)
                if same in seen or not self._power_ok(node, (s,)):
                    continue  # an equal option on a lower GPU scored the same
                seen.add(same)
                after = list(state)
                after[after.index(v)] = v - s.milli
                fix, tie_fix = self._mix_terms(model, idle, s.milli, cpu_milli_left, cpu_after)
                delta = before - self.frag(model, cpu_after, tuple(sorted(after))) - fix
                tie = self._tie_common(node, shape, (s,)) - tie_fix
                tie -= w.tight_weight * (v - s.milli) / MILLI
                tie -= s.memory_mb / 1.0e6  # equal otherwise: the smaller slice
                if s.milli < MILLI and node_free:
                    tie -= w.break_penalty
                if v >= MILLI and has_used_fit:
                    tie -= w.gpu_penalty
                score = combine(delta, tie, w)
                if best is None or score > best.score:
                    best = _Candidate(score, node_id, (s,))
            return best
        chosen = self._gpu_set(node, options, shape.gpu_count)
        if not self._power_ok(node, chosen):
            return None
        left_after = dict(lefts)
        for s in chosen:
            left_after[s.gpu_id] -= s.milli
        taken = sum(s.milli for s in chosen)
        fix, tie_fix = self._mix_terms(model, idle, taken, cpu_milli_left, cpu_after)
        delta = before - self.frag(model, cpu_after, tuple(sorted(left_after.values()))) - fix
        tie = self._tie_common(node, shape, chosen) - tie_fix
        k = len(chosen)
        if node.nvlink and k > 1:
            links = sum(
                1
                for i, a in enumerate(chosen)
                for b in chosen[i + 1 :]
                if (a.gpu_id, b.gpu_id) in node.nvlink or (b.gpu_id, a.gpu_id) in node.nvlink
            )
            tie += NVLINK_WEIGHT * links / (k * (k - 1) / 2)
        tie -= sum(s.memory_mb for s in chosen) / 1.0e6
        return _Candidate(combine(delta, tie, w), node_id, tuple(chosen))

    @staticmethod
    def _gpu_set(node: NodeState, options: list[FreeSlice], k: int) -> tuple[FreeSlice, ...]:
        """k slices on distinct GPUs, as NVLink-connected as the node allows."""
        if not node.nvlink:
            return tuple(options[:k])

        def linked(a: FreeSlice, b: FreeSlice) -> bool:
            return (a.gpu_id, b.gpu_id) in node.nvlink or (b.gpu_id, a.gpu_id) in node.nvlink

        best: tuple[int, tuple[FreeSlice, ...]] | None = None
        for start in options:
            group = [start]
            rest = [s for s in options if s is not start]
            while len(group) < k:
                nxt = max(rest, key=lambda s: (sum(linked(s, g) for g in group), -rest.index(s)))
                group.append(nxt)
                rest.remove(nxt)
            links = sum(linked(a, b) for i, a in enumerate(group) for b in group[i + 1 :])
            if best is None or links > best[0]:
                best = (links, tuple(group))
        assert best is not None
        return best[1]

    # -- choosing a node --

    def signature(self, node_id: int) -> int:
        """Everything a node's score depends on, so identical nodes are scored once per shape.

        Nodes with NVLink (whose GPU ids matter) are their own signature.
        """
        sig = self.sigs.get(node_id)
        if sig is None:
            node = self.nodes[node_id]
            per_gpu: dict[int, list[tuple]] = defaultdict(list)
            for group in self.slices[node_id].by_kind.values():
                for x in group:
                    per_gpu[x.gpu_id].append(
                        (
                            x.kind,
                            x.memory_mb,
                            x.milli,
                            x.compute_units,
                            x.gpu_model,
                            x.temperature_c,
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
                gpus,
            )
            sig = self.sig_ids.setdefault(full, len(self.sig_ids))
            self.sigs[node_id] = sig
        return sig

    def best(self, shape: _Shape) -> _Candidate | None:
        """The highest-scoring node for the shape (ties: the first in node order).

        Per shape a heap of ``(-score, position, node, version)``: only the nodes changed
        since the shape was last asked for are re-scored and pushed afresh; an entry whose
        node has been touched since it was pushed is stale and dropped when it surfaces.
        """
        if shape in self.nowhere:
            return None
        entry = self.cache.get(shape)
        n = len(self.changes)
        if entry is None:
            heap: list[tuple[float, int, int, int]] = []
            todo: Iterable[int] = self.order
            entry = [heap, n]
            self.cache[shape] = entry
        else:
            heap, seen = entry
            todo = set(self.changes[seen:])
            entry[1] = n
        memo = self.score_memo[shape]
        signature, sigs, position, version = self.signature, self.sigs, self.position, self.version
        cpus, memory, free_gpu, free_gpus = (
            self.cpus,
            self.memory,
            self.free_gpu_count,
            self.free_gpus,
        )
        need_cpus, need_memory, need_gpus = shape.cpus, shape.memory_mb, shape.gpu_count
        fresh = []
        for node_id in todo:  # the hot loop: cached lookups inline, calls only on a miss
            if cpus[node_id] < need_cpus or memory[node_id] < need_memory:
                continue
            if need_gpus:
                n_free = free_gpus.get(node_id)
                if (n_free if n_free is not None else free_gpu(node_id)) < need_gpus:
                    continue
            key = sigs.get(node_id)
            if key is None:
                key = signature(node_id)
            score = memo.get(key)
            if score is None:
                cand = self.evaluate(shape, node_id)
                score = memo[key] = cand.score if cand is not None else NEG
                if cand is not None:
                    self.candidates[(shape, node_id)] = (version[node_id], cand)
            if score != NEG:
                fresh.append((-score, position[node_id], node_id, version[node_id]))
        if len(fresh) > len(heap) // 4:
            heap.extend(fresh)
            heapq.heapify(heap)
        else:
            for item in fresh:
                heapq.heappush(heap, item)
        while heap and heap[0][3] != version[heap[0][2]]:
            heapq.heappop(heap)
        if not heap:
            self.nowhere.add(shape)
            return None
        winner = heap[0][2]
        # The candidate scored for this very node, if nothing touched the node since.
        known = self.candidates.get((shape, winner))
        if known is not None and known[0] == version[winner]:
            return known[1]
        return self.evaluate(shape, winner)

    def free_gpu_count(self, node_id: int) -> int:
        """GPUs of the node with any usable free slice (an upper bound on what fits)."""
        n = self.free_gpus.get(node_id)
        if n is None:
            n = self.free_gpus[node_id] = len(
                {x.gpu_id for group in self.slices[node_id].by_kind.values() for x in group}
            )
        return n

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

    def take(self, node_id: int, slices: Sequence[FreeSlice], cpus: float, memory_mb: int) -> None:
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

    def multi_node(self, shape: _Shape) -> list[tuple[int, tuple[FreeSlice, ...]]] | None:
        """All-or-nothing across nodes of one network plane, fewest nodes first."""
        planes: dict[str, list[int]] = defaultdict(list)
        for node_id in self.order:
            plane = self.nodes[node_id].network_plane
            if plane:
                planes[plane].append(node_id)
        per_node_shape = replace(shape, gpu_count=1, cpus=0.0, memory_mb=0, multi_node=False)
        for plane in sorted(planes):
            offers = []
            for node_id in planes[plane]:
                if self.cpus[node_id] < shape.cpus or self.memory[node_id] < shape.memory_mb:
                    continue
                options = self.per_gpu(per_node_shape, node_id)
                if options:
                    offers.append((-len(options), node_id, options))
            offers.sort(key=lambda o: (o[0], o[1]))
            need = shape.gpu_count
            parts = []
            for _, node_id, options in offers:
                got = self._gpu_set(self.nodes[node_id], options, min(need, len(options)))
                parts.append((node_id, got))
                need -= len(got)
                if need == 0:
                    return parts
        return None


# -- the plan ---------------------------------------------------------------------------------


def plan(snapshot: Snapshot, now: datetime) -> Plan:
    """Order, hold, place, preempt, and explain; see the module docstring.

    The cyclic garbage collector is paused for the call: a cycle allocates many small tuples
    and frees them all at the end, and collections in between cost about 7% of a large cycle
    (``python -m scheduling.bench``) for nothing.
    """
    paused = gc.isenabled()
    gc.disable()
    try:
        return _plan(snapshot, now)
    finally:
        if paused:
            gc.enable()


def _plan(snapshot: Snapshot, now: datetime) -> Plan:
    cycle = _Cycle(snapshot, now)
    policy = cycle.policy
    result = Plan()
    _hold_bookings(cycle, result)

    tiers = {
        r.session_id: effective_tier(r.tier, cycle.bookings.get(r.booking_id or -1), now)
        for r in snapshot.queue
    }
    ordered = sorted(snapshot.queue, key=lambda r: order_key(r, tiers[r.session_id], now, policy))
    pending_victims: dict[int, list[RunningSession]] = defaultdict(list)
    for running in snapshot.running:
        if running.preempted_for is not None:
            pending_victims[running.preempted_for].append(running)
    victims_taken: set[int] = set()
    waiting: list[tuple[QueuedRequest, str, bool, datetime | None]] = []
    for r in ordered:
        tier = tiers[r.session_id]
        blocked = quota_block(r, cycle.quotas, cycle.extra_sessions)
        if blocked:
            waiting.append((r, blocked, True, None))
            continue
        shape = cycle.shape_of(r)
        placement = _place(cycle, r, shape)
        if placement is not None:
            result.placements.append(placement)
            count_session(r, cycle.quotas, cycle.extra_sessions)
            continue
        if r.session_id in pending_victims:
            victims = pending_victims[r.session_id]
            deadline = max(v.ends_at for v in victims)
            why = (
                f"starting when {_desktops(len(victims))} preempted for it stop "
                f"(grace ends {deadline:%H:%M} UTC)"
            )
            waiting.append((r, why, False, deadline))
            continue
        if tier <= 2 and not shape.multi_node:
            chosen = _preempt(cycle, r, tier, shape, victims_taken)
            if chosen:
                deadline = now + timedelta(seconds=policy.grace_s)
                for v in chosen:
                    victims_taken.add(v.session_id)
                    result.preemptions.append(
                        Preemption(
                            v.session_id,
                            r.session_id,
                            deadline,
                            f"preempted for a {tier_name(tier)} request: your desktop stops at "
                            f"{deadline:%H:%M} UTC and goes back to the queue, keeping its "
                            "place; save your work (your home folder is kept)",
                        )
                    )
                why = (
                    f"starting when {_desktops(len(chosen))} of lower priority stop "
                    f"(grace ends {deadline:%H:%M} UTC)"
                )
                waiting.append((r, why, False, deadline))
                continue
        waiting.append((r, "", False, None))

    _explain(cycle, result, waiting, tiers)
    placed = [s for p in result.placements for s in _placement_slices(cycle, p)]
    held = [s for r in snapshot.running for s in r.slices] + placed
    used = {s.slice_id for s in placed}
    free = [s for s in snapshot.free_slices if s.slice_id not in used]
    result.alert = alert_for(utilisation(free, held), policy)
    return result


def _desktops(n: int) -> str:
    return "1 desktop" if n == 1 else f"{n} desktops"


def _placement_slices(cycle: _Cycle, p: Placement) -> list[FreeSlice]:
    ids = (*p.slice_ids, *(sid for _, ids in p.others for sid in ids))
    return [cycle.free_by_id[sid] for sid in ids]


def _hold_bookings(cycle: _Cycle, result: Plan) -> None:
    """Hold capacity for the seats of upcoming bookings that will not be free in time anyway.

    A seat is covered, without holding anything, by a slice of a running session expected to
    end before the booking starts (the cycle stops desktops at their time limit), each such
    slice once. The seats left are held on free capacity, tightest slices first, so that a
    class of 8 GB seats does not hold whole GPUs while small slices are free.
    """
    now, policy = cycle.now, cycle.policy
    seated: dict[int, int] = defaultdict(int)
    for r in cycle.snapshot.running:
        if r.booking_id is not None and r.preempted_for is None:
            seated[r.booking_id] += 1
    freeing = sorted(
        (
            (s, r.ends_at)
            for r in cycle.snapshot.running
            if r.booking_id is None
            for s in r.slices
            if s.node_id in cycle.position
        ),
        key=lambda x: (x[0].milli, x[0].memory_mb, x[1], x[0].slice_id),
    )
    promised: set[int] = set()
    horizon = now + timedelta(seconds=policy.booking_hold_horizon_s)
    for b in sorted(cycle.snapshot.bookings, key=lambda b: (b.starts_at, b.booking_id)):
        if b.ends_at <= now or b.starts_at > horizon:
            continue
        need = max(0, b.seats - seated[b.booking_id])
        shape = cycle.shape_of(b.shape)
        if shape.gpu_count == 1 and b.starts_at > now:
            for s, ends in freeing:
                if need == 0:
                    break
                if ends <= b.starts_at and s.slice_id not in promised and cycle.fits(shape, s):
                    promised.add(s.slice_id)
                    need -= 1
        held = 0
        for _ in range(need):
            cand = _tightest(cycle, shape) if shape.gpu_count == 1 else cycle.best(shape)
            if cand is None:
                break
            cycle.take(cand.node_id, cand.slices, shape.cpus, shape.memory_mb)
            cycle.holds[b.booking_id].append(
                _Hold(b, cand.node_id, cand.slices, shape.cpus, shape.memory_mb)
            )
            held += 1
        if held < need:
            result.notes.append(
                f"booking {b.booking_id} ({b.course}): {held} of {need} seats held; "
                f"{need - held} do not fit the pool now"
            )


def _tightest(cycle: _Cycle, shape: _Shape) -> _Candidate | None:
    """The smallest usable free slice for a one-GPU shape (then the best score on its node)."""
    best: tuple[tuple, int, FreeSlice] | None = None
    for node_id in cycle.order:
        if cycle.cpus[node_id] < shape.cpus or cycle.memory[node_id] < shape.memory_mb:
            continue
        node = cycle.nodes[node_id]
        for s in cycle.per_gpu(shape, node_id):
            if not cycle._power_ok(node, (s,)):
                continue
            key = (s.milli, s.memory_mb, cycle.position[node_id], s.gpu_id, s.slice_id)
            if best is None or key < best[0]:
                best = (key, node_id, s)
            break  # per_gpu is sorted by size: the node's first usable one is its smallest
    if best is None:
        return None
    return _Candidate(0.0, best[1], (best[2],))


def _hold_fits(cycle: _Cycle, hold: _Hold, shape: _Shape) -> tuple[FreeSlice, ...] | None:
    if shape.cpus > hold.cpus + cycle.cpus[hold.node_id]:
        return None
    if shape.memory_mb > hold.memory_mb + cycle.memory[hold.node_id]:
        return None
    fit = [s for s in hold.slices if cycle.fits(shape, s)]
    gpus: dict[int, FreeSlice] = {}
    for s in fit:
        gpus.setdefault(s.gpu_id, s)
    if len(gpus) < shape.gpu_count:
        return None
    return tuple(list(gpus.values())[: shape.gpu_count])


def _use_hold(
    cycle: _Cycle, r: QueuedRequest, hold: _Hold, got: tuple[FreeSlice, ...]
) -> Placement:
    """Turn a hold into a placement: unused parts of the hold go back to the pool."""
    cycle.holds[hold.booking.booking_id].remove(hold)
    node_id = hold.node_id
    cycle.cpus[node_id] += hold.cpus - r.cpus
    cycle.memory[node_id] += hold.memory_mb - r.memory_mb
    rest = [s for s in hold.slices if s not in got]
    if rest:
        cycle.slices[node_id] = _NodeSlices(
            [s for kind in cycle.slices[node_id].by_kind.values() for s in kind] + rest
        )
        for s in rest:
            cycle.lefts[node_id][s.gpu_id] += s.milli
        cycle.nowhere.clear()  # capacity came back
    cycle.touch(node_id)
    return Placement(r.session_id, node_id, tuple(s.slice_id for s in got))


def _place(cycle: _Cycle, r: QueuedRequest, shape: _Shape) -> Placement | None:
    now = cycle.now
    if r.booking_id is not None:
        for hold in cycle.holds.get(r.booking_id, []):
            got = _hold_fits(cycle, hold, shape)
            if got is not None:
                return _use_hold(cycle, r, hold, got)
    cand = cycle.best(shape)
    if cand is not None:
        cycle.take(cand.node_id, cand.slices, shape.cpus, shape.memory_mb)
        return Placement(r.session_id, cand.node_id, tuple(s.slice_id for s in cand.slices))
    if shape.multi_node and shape.gpu_count > 1:
        parts = cycle.multi_node(shape)
        if parts is not None:
            for node_id, slices in parts:
                cycle.take(node_id, slices, shape.cpus, shape.memory_mb)
            (first, first_slices), *others = parts
            return Placement(
                r.session_id,
                first,
                tuple(s.slice_id for s in first_slices),
                tuple((n, tuple(s.slice_id for s in sl)) for n, sl in others),
            )
    # Backfill: a hold of a booking that starts after this request would end.
    ends = now + timedelta(seconds=expected_duration_s(r, cycle.policy))
    for booking_id in sorted(cycle.holds, key=lambda b: cycle.bookings[b].starts_at):
        booking = cycle.bookings[booking_id]
        if booking_id == r.booking_id or ends > booking.starts_at:
            continue
        for hold in cycle.holds[booking_id]:
            got = _hold_fits(cycle, hold, shape)
            if got is not None:
                return _use_hold(cycle, r, hold, got)
    return None


def _victim_tier(cycle: _Cycle, v: RunningSession) -> int:
    return effective_tier(v.tier, cycle.bookings.get(v.booking_id or -1), cycle.now)


def _preempt(
    cycle: _Cycle, r: QueuedRequest, tier: int, shape: _Shape, taken: set[int]
) -> list[RunningSession]:
    """The cheapest set of victims on one node that lets ``r`` start there, or []."""
    now, policy = cycle.now, cycle.policy
    protected = timedelta(seconds=policy.protected_runtime_s)
    by_node: dict[int, list[RunningSession]] = defaultdict(list)
    for v in cycle.snapshot.running:
        if v.session_id in taken or v.preempted_for is not None or v.node_id not in cycle.position:
            continue
        vt = _victim_tier(cycle, v)
        if vt <= tier or vt in (TIER_BOOKED, TIER_THESIS) or now - v.started_at < protected:
            continue
        by_node[v.node_id].append(v)
    best: tuple[tuple, list[RunningSession]] | None = None
    for node_id in sorted(by_node):

        def lost(v: RunningSession) -> float:
            return (now - v.started_at).total_seconds() * sum(s.milli for s in v.slices)

        candidates = sorted(
            by_node[node_id], key=lambda v: (-_victim_tier(cycle, v), lost(v), v.session_id)
        )
        chosen: list[RunningSession] = []
        for v in candidates:
            chosen.append(v)
            if _fits_after(cycle, node_id, shape, chosen):
                cost = (
                    sum(1 for c in chosen if _victim_tier(cycle, c) < 3),
                    sum(lost(c) for c in chosen),
                    len(chosen),
                    node_id,
                )
                if best is None or cost < best[0]:
                    best = (cost, list(chosen))
                break
    if best is None:
        return []
    # Trim victims the request does not need (a later, bigger one may have sufficed alone).
    chosen = best[1]
    node_id = chosen[0].node_id
    for v in sorted(chosen, key=lambda v: (_victim_tier(cycle, v), -lost_work(v, now))):
        rest = [c for c in chosen if c is not v]
        if rest and _fits_after(cycle, node_id, shape, rest):
            chosen = rest
    return chosen


def lost_work(v: RunningSession, now: datetime) -> float:
    return (now - v.started_at).total_seconds() * sum(s.milli for s in v.slices)


def _fits_after(cycle: _Cycle, node_id: int, shape: _Shape, victims: list[RunningSession]) -> bool:
    if cycle.cpus[node_id] + sum(v.cpus for v in victims) < shape.cpus:
        return False
    if cycle.memory[node_id] + sum(v.memory_mb for v in victims) < shape.memory_mb:
        return False
    if shape.gpu_count == 0:
        return True
    limit = cycle.policy.temperature_limit_c
    gpus = {s.gpu_id for s in cycle.per_gpu(shape, node_id)}
    for v in victims:
        for s in v.slices:
            if cycle.fits(shape, s) and (s.temperature_c is None or s.temperature_c < limit):
                gpus.add(s.gpu_id)
    return len(gpus) >= shape.gpu_count


# -- reasons and estimated starts ----------------------------------------------------------------


def _explain(
    cycle: _Cycle,
    result: Plan,
    waiting: list[tuple[QueuedRequest, str, bool, datetime | None]],
    tiers: dict[int, int],
) -> None:
    durations = {r.session_id: expected_duration_s(r, cycle.policy) for r in cycle.snapshot.queue}
    busy = {
        sid: cycle.now + timedelta(seconds=durations[p.session_id])
        for p in result.placements
        for sid in (*p.slice_ids, *(x for _, ids in p.others for x in ids))
    }
    etas = _estimate(cycle, [w[0] for w in waiting if not w[2] and w[3] is None], busy)
    ahead_in_tier: dict[int, int] = defaultdict(int)
    position = 0
    for r, reason, blocked, eta in waiting:
        if blocked:
            result.queue.append(QueueEntry(r.session_id, 0, reason, None, True))
            continue
        position += 1
        tier = tiers[r.session_id]
        ahead = ahead_in_tier[tier]
        ahead_in_tier[tier] += 1
        if not reason:
            eta = etas.get(r.session_id)
            reason = _why_waiting(cycle, r, eta)
            if reason.startswith("waiting for a free slice"):
                reason += (
                    f": {ahead} ahead of you in {tier_name(tier)}"
                    if ahead
                    else f": next in {tier_name(tier)}"
                )
                if position > ahead + 1:
                    reason += f", {position - ahead - 1} in higher tiers"
        result.queue.append(QueueEntry(r.session_id, position, reason, eta, False))


def _static_fit(cycle: _Cycle, r: QueuedRequest) -> bool:
    """Could this request ever run in the pool as it is (ignoring what is busy)?"""
    shape = cycle.shape_of(r)
    if shape in cycle.static_fit:
        return cycle.static_fit[shape]
    matching = cycle.matching(shape)
    if r.gpu_count == 0:
        ok = bool(cycle.order)
    elif r.gpu_count == 1:
        ok = bool(matching)
    else:
        gpus: dict[int, set[int]] = defaultdict(set)
        for x in matching:
            gpus[x.node_id].add(x.gpu_id)
        if r.multi_node:
            ok = sum(len(g) for g in gpus.values()) >= r.gpu_count
        else:
            ok = any(len(g) >= r.gpu_count for g in gpus.values())
    cycle.static_fit[shape] = ok
    return ok


def _why_waiting(cycle: _Cycle, r: QueuedRequest, eta: datetime | None) -> str:
    if not _static_fit(cycle, r):
        needs = f"{r.gpu_count} x {r.gpu_memory_min_mb} MB ({'/'.join(r.allowed_kinds)})"
        if r.gpu_models:
            needs += f" on {'/'.join(r.gpu_models)}"
        return (
            f"no healthy node in the pool can run this profile (it needs {needs}); "
            "ask an admin, or pick another profile"
        )
    shape = cycle.shape_of(r)
    if any(cycle.fits(shape, s) for s in cycle.hot):
        return (
            "waiting for a free slice; the free GPUs that fit are at or above "
            f"{cycle.policy.temperature_limit_c:g} °C and get no new work until they cool"
        )
    if any(_hold_fits(cycle, h, shape) for holds in cycle.holds.values() for h in holds):
        return "waiting for a free slice; what is free is held for a class booking"
    return "waiting for a free slice"


def _estimate(
    cycle: _Cycle, waiting: list[QueuedRequest], busy: dict[int, datetime]
) -> dict[int, datetime]:
    """Estimated starts: replay expected ends of running sessions against the queue in order.

    Every slice gets the time it will next be free (now if free, a running session's expected
    end, a hold's booking end). Each waiting request in queue order takes the earliest slices
    that fit it (distinct GPUs of one node for multi-GPU) and keeps them busy for its expected
    duration; its start is when those slices are free. CPU and RAM are not replayed (slices are
    the scarce part), and a request no slice fits gets no estimate.
    """
    now, policy = cycle.now, cycle.policy
    free_at: dict[int, datetime] = {}
    for s in cycle.snapshot.free_slices:
        if s.node_id in cycle.position:
            free_at[s.slice_id] = now
    for v in cycle.snapshot.running:
        for s in v.slices:
            if s.node_id in cycle.position:
                free_at[s.slice_id] = max(v.ends_at, now)
    for sid, until in busy.items():
        free_at[sid] = until
    for holds in cycle.holds.values():
        for h in holds:
            for s in h.slices:
                free_at[s.slice_id] = max(h.booking.ends_at, now)
    # Shapes that differ only in CPU and RAM match the same slices: they share a heap.
    slice_heaps: dict[tuple, list[tuple[datetime, int]]] = {}
    groups: dict[tuple, dict[int, dict[int, list[int]]]] = {}
    node_of = {x.slice_id: x.node_id for group in cycle.types.values() for x in group}
    version: dict[int, int] = defaultdict(int)  # bumped when a node's slice times change
    starts: dict[tuple, tuple[int, datetime, list[int]]] = {}  # (key, k, node) -> per version
    out: dict[int, datetime] = {}
    for r in waiting:
        if r.gpu_count == 0:
            out[r.session_id] = now
            continue
        shape = cycle.shape_of(r)
        key = (shape.kinds, shape.memory_min, shape.models, shape.compute_min, shape.memory_max)
        busy_for = timedelta(seconds=expected_duration_s(r, policy))
        if r.gpu_count == 1:
            heap = slice_heaps.get(key)
            if heap is None:
                heap = [(free_at[x.slice_id], x.slice_id) for x in cycle.matching(shape)]
                heapq.heapify(heap)
                slice_heaps[key] = heap
            while heap and heap[0][0] != free_at[heap[0][1]]:  # later since it was pushed
                heapq.heapreplace(heap, (free_at[heap[0][1]], heap[0][1]))
            if heap:
                start, sid = heap[0]
                free_at[sid] = start + busy_for
                version[node_of.get(sid, 0)] += 1
                heapq.heapreplace(heap, (free_at[sid], sid))
                out[r.session_id] = start
            continue
        by_node = groups.get(key)
        if by_node is None:
            by_node = defaultdict(lambda: defaultdict(list))
            for x in cycle.matching(shape):
                by_node[x.node_id][x.gpu_id].append(x.slice_id)
            groups[key] = by_node
        k = r.gpu_count
        earliest: tuple[datetime, int, list[int]] | None = None
        for node_id, per_gpu in by_node.items():
            if len(per_gpu) < k:
                continue
            cached = starts.get((key, k, node_id))
            if cached is None or cached[0] != version[node_id]:
                firsts = sorted(min((free_at[x], x) for x in sids) for sids in per_gpu.values())
                cached = (version[node_id], firsts[k - 1][0], [x for _, x in firsts[:k]])
                starts[(key, k, node_id)] = cached
            if earliest is None or (cached[1], node_id) < earliest[:2]:
                earliest = (cached[1], node_id, cached[2])
        if earliest is not None:
            for sid in earliest[2]:
                free_at[sid] = earliest[0] + busy_for
            version[earliest[1]] += 1
            out[r.session_id] = earliest[0]
    return out
