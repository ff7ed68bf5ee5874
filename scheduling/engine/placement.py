"""Where a shape goes: node scores, the best node, and the placements other than the best.

:func:`evaluate` scores one node for a shape: the fragmentation gradient of
:mod:`scheduling.engine.scoring` (the same model and weights as the simulator's ``deskpool``
policy), corrected by the learned-demand terms (CPU stranding, model pressure), with
tie-breaks that avoid nodes with many desktops still to start, hot GPUs and racks near their
power budget, prefer NVLink-connected GPU sets, and steer long whole-GPU work to high-power
racks. :func:`best` picks the highest score (ties: the lowest node id); :func:`at_home` comes
first for a request whose person's home is kept on a node (the first of its home nodes that
fits, whatever the scores).

Speed: per shape the score of every node is cached and only nodes changed since are re-scored
(nodes with the same :meth:`Cycle.signature` share one score), so a request costs a heap pop
over the node list; free capacity only shrinks within a cycle, so a shape that fitted nowhere
fits nowhere later in the cycle (``Cycle.nowhere``, cleared when a hold gives capacity back).
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

from .model import WHOLE, FreeSlice, NodeState
from .pool import Candidate, Cycle, Shape
from .scoring import MILLI, Weights, combine, strand_growth

WEIGHTS = Weights()  # the deskpool policy's weights, shared with the simulator
TEMPERATURE_WEIGHT = 2.0  # tie units per degree above TEMPERATURE_SOFT_C
TEMPERATURE_SOFT_C = 60.0
RACK_WEIGHT = 40.0  # tie units at a rack drawing its whole budget (from 80% of it)
NVLINK_WEIGHT = 50.0  # tie units for a fully NVLink-connected GPU set
HEAVY_WEIGHT = 40.0  # long whole-GPU work on a high-power rack (and light work off it)
# Start backlog. A node's agent starts START_WAVE desktops at once (nodeagent/config.py
# start_workers, its default), so every START_WAVE desktops placed there and not yet running
# delay the next start by one more wave (0.2 s simulated to about 0.7 s with Docker).
# START_WEIGHT tie units per full wave queued, at most START_CAP waves: where the
# fragmentation levels tie, as they usually do for CPU-only desktops, a class's burst goes to
# the nodes a wave at a time and starts in parallel instead of in waves on one node. Within a
# wave the node order decides as before, so GPU work packs as it did (counted per desktop,
# the term spread GPU work too and made bench.scheduler's plan() 1.5x slower). At most 25
# units: below break_penalty (30), so a backlog never makes a fractional GPU request break a
# free node, and nothing next to one fragmentation level (1e6).
START_WAVE = 10
START_WEIGHT = 2.5
START_CAP = 10
# A booking's hold (a seat, where its warm desktop will run) goes to a node that keeps homes
# of the class's students when that node scores within HOME_WEIGHT tie units of the best
# (:func:`homeward`); for one-GPU shapes, held on the tightest slice, a home node wins among
# equally tight slices. More than a backlog of eight waves or 10 degrees of GPU temperature,
# half a full rack's penalty, nothing next to one fragmentation level (1e6).
HOME_WEIGHT = 20.0
# Whole GPUs kept for work that needs them (issue 38). A one-GPU request that a free smaller
# slice (MIG instance, share) could take loses every whole-GPU option by KEPT_WHOLE: more
# than any fragmentation level (at most 100 levels of 1e6), so the slice wins whatever the
# other terms say. With nothing smaller free a whole GPU stays allowed (the person does not
# wait while a card idles; billing caps what they pay), and one whose NVLink peers are free
# loses NVLINK_KEEP tie units per free peer, at most three: the multi-GPU work that needs
# NVLink pairs finds them.
KEPT_WHOLE = 1.0e9
NVLINK_KEEP = 20.0
NEG = float("-inf")


# -- the score of one node --


def mix_terms(
    cycle: Cycle, model: str, idle: int, taken: int, cpu: int, cpu_after: int
) -> tuple[float, float]:
    """(delta, tie) corrections of the learned-demand terms, as in ``score_placement``."""
    w = WEIGHTS
    strand = strand_growth(idle, taken, cpu, cpu_after, cycle.cpu_per_gpu)
    pressure = cycle.pressure.get(model, 0.0) if taken else 0.0
    delta = w.strand_primary * strand + w.scarcity_primary * pressure * taken
    return delta, w.strand_weight * strand / MILLI + w.scarcity * pressure


def tie_common(cycle: Cycle, node: NodeState, shape: Shape, slices: Sequence[FreeSlice]) -> float:
    """Start backlog, temperature, rack power and heavy-work tie-breaks, shared by every
    kind of placement."""
    tie = -START_WEIGHT * min(cycle.pending[node.node_id] // START_WAVE, START_CAP)
    for s in slices:
        if s.temperature_c is not None and s.temperature_c > TEMPERATURE_SOFT_C:
            tie -= TEMPERATURE_WEIGHT * (s.temperature_c - TEMPERATURE_SOFT_C)
    budget = cycle.rack_budget.get(node.rack)
    if budget:
        used = 1.0 - cycle.rack_headroom[node.rack] / budget
        if used > 0.8:
            tie -= RACK_WEIGHT * (used - 0.8) / 0.2
    if shape.heavy:
        tie += HEAVY_WEIGHT if node.high_power else 0.0
    elif node.high_power and shape.gpu_count:
        tie -= HEAVY_WEIGHT / 4
    return tie


def evaluate(cycle: Cycle, shape: Shape, node_id: int) -> Candidate | None:
    """The node's best placement for the shape with its score, or None if it does not fit."""
    node = cycle.nodes[node_id]
    cpu_left = cycle.cpus[node_id]
    if cpu_left < shape.cpus or cycle.memory[node_id] < shape.memory_mb:
        return None
    if node.rack in cycle.stopped_racks:
        return None  # a rack at its power warning takes no new work, CPU-only included
    model = cycle.node_model.get(node_id, "")
    lefts = cycle.lefts[node_id]
    state = tuple(sorted(lefts.values()))
    cpu_milli_left = int(cpu_left * 1000)
    cpu_after = int((cpu_left - shape.cpus) * 1000)
    before = cycle.frag(model, cpu_milli_left, state)
    idle = sum(state)
    if shape.gpu_count == 0:
        fix, tie_fix = mix_terms(cycle, model, idle, 0, cpu_milli_left, cpu_after)
        delta = before - cycle.frag(model, cpu_after, state) - fix
        tie = tie_common(cycle, node, shape, ()) - tie_fix
        return Candidate(combine(delta, tie, WEIGHTS), node_id, ())
    options = cycle.per_gpu(shape, node_id)
    if len(options) < shape.gpu_count:
        return None
    w = WEIGHTS
    if shape.gpu_count == 1:
        node_free = bool(state) and all(v >= MILLI for v in state)
        has_used_fit = any(lefts[s.gpu_id] < MILLI for s in options)
        best: Candidate | None = None
        seen: set[tuple] = set()
        for s in options:
            v = lefts[s.gpu_id]
            same = (v, s.milli, s.memory_mb, s.temperature_c, s.power_w)
            if same in seen or not cycle.power_ok(node, (s,)):
                continue  # an equal option on a lower GPU scored the same
            seen.add(same)
            after = list(state)
            after[after.index(v)] = v - s.milli
            fix, tie_fix = mix_terms(cycle, model, idle, s.milli, cpu_milli_left, cpu_after)
            delta = before - cycle.frag(model, cpu_after, tuple(sorted(after))) - fix
            tie = tie_common(cycle, node, shape, (s,)) - tie_fix
            tie -= w.tight_weight * (v - s.milli) / MILLI
            tie -= s.memory_mb / 1.0e6  # equal otherwise: the smaller slice
            if s.milli < MILLI and node_free:
                tie -= w.break_penalty
            if v >= MILLI and has_used_fit:
                tie -= w.gpu_penalty
            score = combine(delta, tie, w)
            if s.kind == WHOLE:
                score -= whole_cost(cycle, shape, node, s)
            if best is None or score > best.score:
                best = Candidate(score, node_id, (s,))
        return best
    chosen = gpu_set(node, options, shape.gpu_count)
    if not cycle.power_ok(node, chosen):
        return None
    left_after = dict(lefts)
    for s in chosen:
        left_after[s.gpu_id] -= s.milli
    taken = sum(s.milli for s in chosen)
    fix, tie_fix = mix_terms(cycle, model, idle, taken, cpu_milli_left, cpu_after)
    delta = before - cycle.frag(model, cpu_after, tuple(sorted(left_after.values()))) - fix
    tie = tie_common(cycle, node, shape, chosen) - tie_fix
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
    return Candidate(combine(delta, tie, w), node_id, tuple(chosen))


def whole_cost(cycle: Cycle, shape: Shape, node: NodeState, s: FreeSlice) -> float:
    """What taking the whole GPU ``s`` for a one-GPU shape costs: :data:`KEPT_WHOLE` while a
    smaller fitting slice is free, plus :data:`NVLINK_KEEP` per free NVLink peer."""
    cost = KEPT_WHOLE if cycle.smaller_free(shape) else 0.0
    if node.nvlink:
        lefts = cycle.lefts[node.node_id]
        peers = sum(
            1
            for g, left in lefts.items()
            if g != s.gpu_id
            and left >= MILLI
            and ((s.gpu_id, g) in node.nvlink or (g, s.gpu_id) in node.nvlink)
        )
        cost += NVLINK_KEEP * min(peers, 3)
    return cost


def gpu_set(node: NodeState, options: list[FreeSlice], k: int) -> tuple[FreeSlice, ...]:
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


def best(cycle: Cycle, shape: Shape) -> Candidate | None:
    """The highest-scoring node for the shape (ties: the first in node order).

    Per shape a heap of ``(-score, position, node, version)``: only the nodes changed
    since the shape was last asked for are re-scored and pushed afresh; an entry whose
    node has been touched since it was pushed is stale and dropped when it surfaces.
    """
    if shape in cycle.nowhere:
        return None
    forget_if_kept_changed(cycle, shape)
    entry = cycle.cache.get(shape)
    n = len(cycle.changes)
    if entry is None:
        heap: list[tuple[float, int, int, int]] = []
        todo: Iterable[int] = cycle.order
        entry = [heap, n]
        cycle.cache[shape] = entry
    else:
        heap, seen = entry
        todo = set(cycle.changes[seen:])
        entry[1] = n
    memo = cycle.score_memo[shape]
    signature, sigs, position, version = cycle.signature, cycle.sigs, cycle.position, cycle.version
    cpus, memory, free_gpu, free_gpus = (
        cycle.cpus,
        cycle.memory,
        cycle.free_gpu_count,
        cycle.free_gpus,
    )
    candidates = cycle.candidates
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
            cand = evaluate(cycle, shape, node_id)
            score = memo[key] = cand.score if cand is not None else NEG
            if cand is not None:
                candidates[(shape, node_id)] = (version[node_id], cand)
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
        cycle.nowhere.add(shape)
        return None
    winner = heap[0][2]
    # The candidate scored for this very node, if nothing touched the node since.
    known = candidates.get((shape, winner))
    if known is not None and known[0] == version[winner]:
        return known[1]
    return evaluate(cycle, shape, winner)


def forget_if_kept_changed(cycle: Cycle, shape: Shape) -> None:
    """Whole-GPU scores depend on whether a smaller slice is free anywhere
    (:func:`whole_cost`), which no node's version tracks: when that changes, the shape's
    cached scores are dropped."""
    if shape.gpu_count != 1 or WHOLE not in shape.kinds:
        return
    now = cycle.smaller_free(shape)
    if cycle.kept.setdefault(shape, now) == now:
        return
    cycle.kept[shape] = now
    cycle.cache.pop(shape, None)
    cycle.score_memo.pop(shape, None)
    for key in [k for k in cycle.candidates if k[0] == shape]:
        del cycle.candidates[key]


def at_home(cycle: Cycle, shape: Shape, home_nodes: Sequence[int]) -> Candidate | None:
    """The first of the request's home nodes that can take the shape, with its best
    placement there; None when none can (unhealthy, full, too hot...): then :func:`best`.

    Per request, not per shape: the shape's caches are shared by every request of that
    shape, the home is one person's. A candidate :func:`best` scored for this very node
    (and nothing touched since) is reused; else the node alone is evaluated.
    """
    if shape in cycle.nowhere:
        return None
    for node_id in home_nodes:
        if node_id not in cycle.position:
            continue  # unhealthy, cordoned, draining or unknown
        known = cycle.candidates.get((shape, node_id))
        if known is not None and known[0] == cycle.version[node_id]:
            return known[1]
        cand = evaluate(cycle, shape, node_id)
        if cand is not None:
            return cand
    return None


def multi_node(cycle: Cycle, shape: Shape) -> list[tuple[int, tuple[FreeSlice, ...]]] | None:
    """All-or-nothing across nodes of one network plane, fewest nodes first."""
    planes: dict[str, list[int]] = defaultdict(list)
    for node_id in cycle.order:
        plane = cycle.nodes[node_id].network_plane
        if plane:
            planes[plane].append(node_id)
    per_node_shape = replace(shape, gpu_count=1, cpus=0.0, memory_mb=0, multi_node=False)
    for plane in sorted(planes):
        offers = []
        for node_id in planes[plane]:
            if cycle.cpus[node_id] < shape.cpus or cycle.memory[node_id] < shape.memory_mb:
                continue
            options = cycle.per_gpu(per_node_shape, node_id)
            if options:
                offers.append((-len(options), node_id, options))
        offers.sort(key=lambda o: (o[0], o[1]))
        need = shape.gpu_count
        parts = []
        for _, node_id, options in offers:
            got = gpu_set(cycle.nodes[node_id], options, min(need, len(options)))
            parts.append((node_id, got))
            need -= len(got)
            if need == 0:
                return parts
    return None


def homeward(
    cycle: Cycle, shape: Shape, cand: Candidate | None, homes: Mapping[int, int]
) -> Candidate | None:
    """``cand`` (:func:`best`'s), or the best placement on a node of ``homes`` (node: how
    many homes still want a seat there) scoring within HOME_WEIGHT tie units of it, the node
    with most homes first. Healthy, open nodes only; nothing that does not fit."""
    if cand is None or not homes:
        return cand
    position = cycle.position
    nodes = [n for n, count in homes.items() if count > 0 and n in position]
    for node_id in sorted(nodes, key=lambda n: (-homes[n], position[n])):
        if node_id == cand.node_id:
            return cand
        known = cycle.candidates.get((shape, node_id))
        if known is not None and known[0] == cycle.version[node_id]:
            home: Candidate | None = known[1]
        else:
            home = evaluate(cycle, shape, node_id)
        if home is not None and home.score >= cand.score - HOME_WEIGHT:
            return home
    return cand


def tightest(
    cycle: Cycle, shape: Shape, homes: Mapping[int, int] | None = None
) -> Candidate | None:
    """The smallest usable free slice for a one-GPU shape; on a tie the node with most
    ``homes`` (node: homes still wanting a seat there), then the first in node order."""
    homes = homes or {}
    found: tuple[tuple, int, FreeSlice] | None = None
    for node_id in cycle.order:
        if cycle.cpus[node_id] < shape.cpus or cycle.memory[node_id] < shape.memory_mb:
            continue
        node = cycle.nodes[node_id]
        for s in cycle.per_gpu(shape, node_id):
            if not cycle.power_ok(node, (s,)):
                continue
            key = (
                s.milli,
                s.memory_mb,
                -homes.get(node_id, 0),
                cycle.position[node_id],
                s.gpu_id,
                s.slice_id,
            )
            if found is None or key < found[0]:
                found = (key, node_id, s)
            break  # per_gpu is sorted by size: the node's first usable one is its smallest
    if found is None:
        return None
    return Candidate(0.0, found[1], (found[2],))
