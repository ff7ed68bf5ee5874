"""Mutable cluster state: per node CPU, memory and per-GPU milli left.

Node indices are positions in ``Cluster.nodes``; the runner builds the cluster with the nodes in
the seed's tie order, so "first node with the best score" is the tie rule. Every placement is
logged in ``changes`` so policies can refresh only the nodes that changed.
"""

from __future__ import annotations

from collections.abc import Sequence

from .trace import MILLI, Node, Pod


class Cluster:
    def __init__(self, nodes: Sequence[Node]):
        self.nodes = list(nodes)
        self.cpu_left = [n.cpu_milli for n in self.nodes]
        self.mem_left = [n.memory_mib for n in self.nodes]
        self.gpu_left = [[MILLI] * n.num_gpu for n in self.nodes]
        self.models = [n.model for n in self.nodes]
        self.gpu_capacity = MILLI * sum(n.num_gpu for n in self.nodes)
        self.gpu_allocated = 0
        self.changes: list[int] = []  # node index changed by placement number i

    def fits(self, j: int, pod: Pod) -> bool:
        """Whether node ``j`` can host ``pod`` now (CPU, memory, GPU model, GPU room)."""
        if self.cpu_left[j] < pod.cpu_milli or self.mem_left[j] < pod.memory_mib:
            return False
        if not pod.num_gpu:
            return True
        lefts = self.gpu_left[j]
        if not lefts:
            return False
        # A pod with a gpu_spec always has allowed_models (trace.Pod).
        if pod.gpu_spec and self.models[j] not in pod.allowed_models:  # type: ignore[operator]
            return False
        if pod.is_share:
            return max(lefts) >= pod.gpu_milli
        return lefts.count(MILLI) >= pod.num_gpu

    def place(self, j: int, pod: Pod, gpus: Sequence[int]) -> None:
        if not self.fits(j, pod):
            raise ValueError(f"{pod.name} does not fit on {self.nodes[j].name}")
        if len(gpus) != pod.num_gpu or len(set(gpus)) != len(gpus):
            raise ValueError(f"{pod.name} needs {pod.num_gpu} distinct GPUs, got {gpus}")
        lefts = self.gpu_left[j]
        for g in gpus:
            if lefts[g] < pod.gpu_milli:
                raise ValueError(f"GPU {g} of {self.nodes[j].name} lacks room for {pod.name}")
        for g in gpus:
            lefts[g] -= pod.gpu_milli
        self.cpu_left[j] -= pod.cpu_milli
        self.mem_left[j] -= pod.memory_mib
        self.gpu_allocated += pod.gpu_request
        self.changes.append(j)


def exclusive_gpus(lefts: Sequence[int], count: int) -> tuple[int, ...]:
    """The first ``count`` fully free GPUs by index (the simulator's exclusive allocation)."""
    out = [i for i, v in enumerate(lefts) if v == MILLI][:count]
    return tuple(out)
