"""Placement policies: ``Policy.choose(pod, cluster) -> (node, gpus) | None``.

A policy scores every feasible node; the best score wins and ties go to the lowest node index
(the cluster holds its nodes in the seed's random tie order). Scores per pod shape are kept in
one list per shape and only the nodes placed on since the shape was last seen are re-scored, so
a decision costs a C-speed ``max`` over the list plus a few node evaluations.

Semantics follow the published simulator (hkust-adsl/kubernetes-scheduler-simulator):
integer scores 0-100, BestFit = 100 * (1 - 0.5 * cpu_left_after/128 cores - 0.5 *
gpu_left_after/8 GPUs) truncated; FGD = 100 * sigmoid(-(fragmentation increase)/1000) truncated,
GPU inside the node chosen by the policy (BestFit: tightest fitting GPU; Random: random fitting
GPU; FGD: the GPU minimising fragmentation); whole GPUs go to the lowest free indices.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Sequence

from scheduling.engine.scoring import (
    FragmentationModel,
    Weights,
    WorkloadMix,
    score_placement,
    target_shapes,
)

from .cluster import Cluster, exclusive_gpus
from .trace import MILLI, Pod
from .workload import TypicalPod

MAX_SPEC_CPU = 128_000  # milli-CPU, BestFit normaliser
MAX_SPEC_GPU = 8_000  # milli-GPU, BestFit normaliser

Choice = tuple[int, tuple[int, ...]]


class Policy:
    """Base: subclasses implement :meth:`evaluate` (score >= 0 and GPUs, or None if it won't)."""

    name = "base"

    def __init__(self) -> None:
        self.cluster: Cluster | None = None
        self.rng = random.Random(0)
        self._shapes: dict[tuple, list] = {}

    def reset(self, cluster: Cluster, rng: random.Random) -> None:
        self.cluster = cluster
        self.rng = rng
        self._shapes = {}

    def evaluate(self, j: int, pod: Pod, cluster: Cluster) -> tuple[int, tuple[int, ...]] | None:
        raise NotImplementedError

    def _scores(self, pod: Pod, cluster: Cluster) -> tuple[list[int], list]:
        if cluster is not self.cluster:
            self.reset(cluster, self.rng)
        entry = self._shapes.get(pod.kind)
        n_changes = len(cluster.changes)
        if entry is None:
            scores = [-1] * len(cluster.nodes)
            gpus: list[tuple[int, ...] | None] = [None] * len(cluster.nodes)
            todo: Iterable[int] = range(len(cluster.nodes))
            entry = [scores, gpus, n_changes]
            self._shapes[pod.kind] = entry
        else:
            scores, gpus, seen = entry
            todo = set(cluster.changes[seen:])
            entry[2] = n_changes
        fits = cluster.fits
        for j in todo:
            res = self.evaluate(j, pod, cluster) if fits(j, pod) else None
            if res is None:
                scores[j], gpus[j] = -1, None
            else:
                scores[j], gpus[j] = res
        return scores, gpus

    def choose(self, pod: Pod, cluster: Cluster) -> Choice | None:
        scores, gpus = self._scores(pod, cluster)
        best = max(scores)
        if best < 0:
            return None
        j = scores.index(best)
        return j, gpus[j]


def _share_gpus(lefts: Sequence[int], milli: int) -> list[int]:
    return [i for i, v in enumerate(lefts) if v >= milli]


class RandomPolicy(Policy):
    """A uniformly random feasible node; a random fitting GPU for a fractional pod."""

    name = "random"

    def evaluate(self, j, pod, cluster):
        return 0, ()

    def choose(self, pod, cluster):
        scores, _ = self._scores(pod, cluster)
        feasible = [j for j, s in enumerate(scores) if s >= 0]
        if not feasible:
            return None
        j = feasible[self.rng.randrange(len(feasible))]
        lefts = cluster.gpu_left[j]
        if pod.is_share:
            cands = _share_gpus(lefts, pod.gpu_milli)
            return j, (cands[self.rng.randrange(len(cands))],)
        return j, exclusive_gpus(lefts, pod.num_gpu)


class BestFitPolicy(Policy):
    """The node with the least (weighted) CPU + GPU left after placement."""

    name = "bestfit"

    def evaluate(self, j, pod, cluster):
        lefts = cluster.gpu_left[j]
        score = 0.0
        score += (cluster.cpu_left[j] - pod.cpu_milli) / MAX_SPEC_CPU * 0.5
        score += (sum(lefts) - pod.gpu_request) / MAX_SPEC_GPU * 0.5
        value = int((1.0 - score) * 100)
        if pod.is_share:
            best = -1
            for i, v in enumerate(lefts):
                if v >= pod.gpu_milli and (best < 0 or v < lefts[best]):
                    best = i
            return value, (best,)
        return value, exclusive_gpus(lefts, pod.num_gpu)


def Fragmentation(typical: Sequence[TypicalPod]) -> FragmentationModel:  # noqa: N802
    """Node fragmentation F_n(M) = sum_m p_m * (GPU milli on n that task m cannot use).

    The engine's model (:class:`scheduling.engine.scoring.FragmentationModel`) with the
    trace's typical pods as the target workload, weighted by their share.
    """
    shapes = [(t.cpu_milli, t.gpu_milli, t.num_gpu, t.allowed_models, t.share) for t in typical]
    return FragmentationModel(target_shapes(shapes, 0.0))


def _sigmoid_score(delta: float) -> int:
    return int(100.0 / (1.0 + math.exp(-delta / 1000.0)))


class FGDPolicy(Policy):
    """Fragmentation gradient descent: minimise the growth of node fragmentation."""

    name = "fgd"

    def __init__(self, typical: Sequence[TypicalPod]):
        super().__init__()
        self.frag = Fragmentation(typical)
        self.memo: dict[tuple, tuple[int, dict[int, int] | None]] = {}

    def evaluate(self, j, pod, cluster):
        lefts = cluster.gpu_left[j]
        model, cpu = cluster.models[j], cluster.cpu_left[j]
        state = tuple(sorted(lefts))
        key = (model, cpu, state, pod.cpu_milli, pod.num_gpu, pod.gpu_milli, pod.gpu_spec)
        got = self.memo.get(key)
        if got is None:
            got = self.memo[key] = self._score_state(model, cpu, state, pod)
        score, by_value = got
        if pod.is_share:
            # The simulator keeps the first GPU index among equal best scores.
            for i, v in enumerate(lefts):
                if v >= pod.gpu_milli and by_value is not None and by_value[v] == score:
                    return score, (i,)
        return score, exclusive_gpus(lefts, pod.num_gpu)

    def _score_state(self, model, cpu, state, pod):
        frag = self.frag
        before = frag(model, cpu, state)
        cpu_after = cpu - pod.cpu_milli
        if pod.is_share:
            by_value: dict[int, int] = {}
            for v in state:
                if v < pod.gpu_milli or v in by_value:
                    continue
                after = list(state)
                after[after.index(v)] = v - pod.gpu_milli
                delta = before - frag(model, cpu_after, tuple(sorted(after)))
                by_value[v] = _sigmoid_score(delta)
            return max(by_value.values()), by_value
        after = list(state)
        for _ in range(pod.num_gpu):
            after[after.index(MILLI)] = 0
        return _sigmoid_score(before - frag(model, cpu_after, tuple(sorted(after)))), None


class DeskpoolPolicy(Policy):
    """Fragmentation delta (unrounded, demand-weighted target) with packing tie-breaks.

    Scoring lives in :mod:`scheduling.engine.scoring`; see ``docs/sim.md``.
    """

    name = "deskpool"

    def __init__(self, typical: Sequence[TypicalPod], weights: Weights | None = None):
        super().__init__()
        self.weights = weights or Weights()
        shapes = [(t.cpu_milli, t.gpu_milli, t.num_gpu, t.allowed_models, t.share) for t in typical]
        self.frag = FragmentationModel(target_shapes(shapes, self.weights.demand_mix))
        self.memo: dict[tuple, tuple[float, int | None]] = {}
        w = self.weights
        self._learn = bool(w.strand_weight or w.strand_primary or w.scarcity or w.scarcity_primary)
        self._reset_learning()

    def _reset_learning(self) -> None:
        self._seen = 0  # arrivals so far
        self._next_learn = LEARN_FIRST
        self._mix = WorkloadMix()
        self.cpu_per_gpu = 0.0
        self.pressure: dict[str, float] = {}

    def reset(self, cluster, rng):
        super().reset(cluster, rng)
        self._reset_learning()
        self.memo = {}

    def _observe(self, pod: Pod, cluster: Cluster) -> None:
        """Learn the workload's mix from arrivals so far; the learned figures are refreshed at
        arrivals 64, 128, 256, ... (each refresh re-scores every node)."""
        self._seen += 1
        self._mix.add(pod.cpu_milli, pod.gpu_request, pod.allowed_models)
        if self._seen < self._next_learn or not self._mix.gpu:
            return
        self._next_learn *= 2
        self.cpu_per_gpu = self._mix.cpu_per_gpu()
        cap: dict[str, float] = {}
        for node in cluster.nodes:
            if node.num_gpu:
                cap[node.model] = cap.get(node.model, 0) + node.num_gpu * MILLI
        self.pressure = self._mix.pressure(cap)
        self._shapes = {}
        self.memo = {}

    def evaluate(self, j, pod, cluster):
        lefts = cluster.gpu_left[j]
        model, cpu = cluster.models[j], cluster.cpu_left[j]
        state = tuple(sorted(lefts))
        key = (model, cpu, state, pod.cpu_milli, pod.num_gpu, pod.gpu_milli)
        got = self.memo.get(key)
        if got is None:
            got = self.memo[key] = score_placement(
                self.frag, model, cpu, state, pod.cpu_milli, pod.num_gpu, pod.gpu_milli,
                self.weights, self.cpu_per_gpu, self.pressure.get(model, 0.0),
            )  # fmt: skip
        score, value = got
        if pod.is_share:
            return score, (lefts.index(value),)
        return score, exclusive_gpus(lefts, pod.num_gpu)

    def choose(self, pod, cluster):
        if cluster is not self.cluster:
            self.reset(cluster, self.rng)
        if self._learn:
            self._observe(pod, cluster)
        entry = self._shapes.get(pod.kind)
        n_changes = len(cluster.changes)
        if entry is None:
            scores, gpus = [_NO] * len(cluster.nodes), [None] * len(cluster.nodes)
            todo: Iterable[int] = range(len(cluster.nodes))
            self._shapes[pod.kind] = [scores, gpus, n_changes]
        else:
            scores, gpus, seen = entry
            todo = set(cluster.changes[seen:])
            entry[2] = n_changes
        fits = cluster.fits
        for j in todo:
            if fits(j, pod):
                scores[j], gpus[j] = self.evaluate(j, pod, cluster)
            else:
                scores[j], gpus[j] = _NO, None
        best = max(scores)
        if best == _NO:
            return None
        j = scores.index(best)
        return j, gpus[j]


_NO = float("-inf")
LEARN_FIRST = 64  # first refresh of what deskpool learns from arrivals

POLICIES = ("random", "bestfit", "fgd", "deskpool")


def make_policy(name: str, typical: Sequence[TypicalPod]) -> Policy:
    if name == "random":
        return RandomPolicy()
    if name == "bestfit":
        return BestFitPolicy()
    if name == "fgd":
        return FGDPolicy(typical)
    if name == "deskpool":
        return DeskpoolPolicy(typical)
    raise ValueError(f"unknown policy {name!r}; known: {', '.join(POLICIES)}")
