"""Workload construction (shuffle + resample to 130%) and the FGD target workload."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from .trace import Pod


@dataclass(frozen=True)
class TypicalPod:
    cpu_milli: int
    gpu_milli: int  # per GPU, 0 for CPU-only
    num_gpu: int
    gpu_spec: str
    share: float  # probability p_m, sums to 1 over the list

    @property
    def allowed_models(self) -> frozenset[str] | None:
        return frozenset(self.gpu_spec.split("|")) if self.gpu_spec else None


def typical_pods(
    pods: Sequence[Pod], popularity: float = 0.95, include_cpu_pods: bool = True
) -> list[TypicalPod]:
    """The target workload of FGD: the most frequent pod shapes covering ``popularity`` of pods.

    Shape = (CPU, GPU milli, GPU count, GPU model constraint); memory is not part of it. Shapes
    are taken in decreasing count until their cumulative share reaches ``popularity``, then
    renormalised (the published simulator's defaults: CPU pods included, 95%, step 1).
    """
    counts: Counter[tuple[int, int, int, str]] = Counter()
    for p in pods:
        if not include_cpu_pods and p.num_gpu == 0:
            continue
        counts[(p.cpu_milli, p.gpu_milli, p.num_gpu, p.gpu_spec)] += 1
    total = sum(counts.values())
    # Decreasing count; equal counts: larger (cpu, milli, num, spec) first.
    ranked = sorted(counts.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)
    chosen, cum = [], 0
    for key, n in ranked:
        if cum >= popularity * total:
            break
        chosen.append((key, n))
        cum += n
    return [TypicalPod(c, g, k, s, n / cum) for (c, g, k, s), n in chosen]


def build_workload(
    pods: Sequence[Pod], gpu_capacity: int, seed: int, ratio: float = 1.3
) -> tuple[list[Pod], random.Random]:
    """Shuffle with the seed, then append pods drawn with replacement (same RNG) until the
    arrived GPU request reaches ``ratio`` x capacity. Returns the list and the RNG (to go on)."""
    rng = random.Random(seed)
    out = list(pods)
    rng.shuffle(out)
    total = sum(p.gpu_request for p in out)
    target = ratio * gpu_capacity
    while total < target:
        p = pods[rng.randrange(len(pods))]
        out.append(p)
        total += p.gpu_request
    return out, rng
