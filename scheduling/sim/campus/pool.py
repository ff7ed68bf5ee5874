"""The simulated pool: the demo fleet's five nodes, their slices, racks and node states."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from scheduling.engine import FreeSlice, NodeState, Rack, gpu_compute_units, slice_milli
from scheduling.engine.mig import can_place, table_for, validate_layout

A100 = "NVIDIA A100-SXM4-80GB"
T4 = "Tesla T4"
# GPU memory of each MIG instance as the demo fleet (nodeagent/fleets/demo.yaml) reports it.
MIG_MEMORY_MB = {"1g.10gb": 9984, "2g.20gb": 19968, "3g.40gb": 40192, "4g.40gb": 40192}
DEFAULT_GPU_POWER_W = 300.0  # as the portal: a GPU that reports no power limit


@dataclass(frozen=True)
class GpuLayout:
    mode: str  # mig | whole | share
    profiles: tuple[str, ...] = ()  # mig: the instances of each GPU
    shares: int = 1  # share: slices per GPU


@dataclass(frozen=True)
class NodeSpec:
    name: str
    gpu_model: str
    gpu_count: int
    gpu_memory_mb: int
    layout: GpuLayout
    cpus: int
    memory_mb: int
    high_power: bool
    nvlink: bool
    rack: str = ""  # the node's ``rack`` label
    power_limit_w: float = 0.0  # per GPU, as the agent reports it (0: not reported)


DEMO_MIG = GpuLayout("mig", ("3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"))
MEDIUM_MIG = GpuLayout("mig", ("3g.40gb", "2g.20gb", "2g.20gb"))
WHOLE = GpuLayout("whole")

# The demo fleet's five nodes; gpu-a03/a04 are exposed whole (MIG off), see docs/campus.md.
DEFAULT_LAYOUT: tuple[NodeSpec, ...] = (
    NodeSpec("gpu-a01", A100, 8, 81920, DEMO_MIG, 128, 1048576, True, True, "r1", 400.0),
    NodeSpec("gpu-a02", A100, 8, 81920, MEDIUM_MIG, 128, 1048576, True, True, "r1", 400.0),
    NodeSpec("gpu-a03", A100, 8, 81920, WHOLE, 128, 1048576, True, True, "r2", 400.0),
    NodeSpec("gpu-a04", A100, 8, 81920, WHOLE, 128, 1048576, True, True, "r2", 400.0),
    NodeSpec(
        "gpu-t01", T4, 3, 15360, GpuLayout("share", shares=4), 32, 196608, False, False, "r3", 70.0
    ),
)


@dataclass
class Pool:
    nodes: list[NodeSpec]
    slices: list[FreeSlice]
    capacity_milli: int

    @property
    def gpus(self) -> int:
        return sum(n.gpu_count for n in self.nodes)


def mig_instances(gpu_model: str, profiles: tuple[str, ...]) -> list[tuple[str, int]]:
    """``(profile, start)`` for each instance, placed best-fit and checked against the table."""
    table = table_for(gpu_model)
    placed: list[tuple[str, int]] = []
    for name in profiles:
        start = can_place(table, placed, name)
        if start is None:
            raise ValueError(f"{name} does not fit next to {placed} on {gpu_model}")
        placed.append((name, start))
    if not validate_layout(table, placed):
        raise ValueError(f"invalid MIG layout {placed} on {gpu_model}")
    return placed


def build_pool(layout: tuple[NodeSpec, ...] = DEFAULT_LAYOUT) -> Pool:
    """Every slice of the layout, as the portal's snapshot has them (milli, CU, power)."""
    slices: list[FreeSlice] = []
    sid = 0
    for node_id, spec in enumerate(layout, start=1):
        cu, _ = gpu_compute_units(spec.gpu_model)
        power = spec.power_limit_w or DEFAULT_GPU_POWER_W
        for g in range(spec.gpu_count):
            gpu_id = node_id * 100 + g
            if spec.layout.mode == "mig":
                parts = [
                    (MIG_MEMORY_MB[p], slice_milli("mig", spec.gpu_model, p))
                    for p, _ in mig_instances(spec.gpu_model, spec.layout.profiles)
                ]
            elif spec.layout.mode == "share":
                n = spec.layout.shares
                parts = [(spec.gpu_memory_mb // n, slice_milli("share", spec.gpu_model, shares=n))]
                parts *= n
            else:
                parts = [(spec.gpu_memory_mb, slice_milli("whole", spec.gpu_model))]
            for memory_mb, milli in parts:
                sid += 1
                kind = spec.layout.mode
                slices.append(
                    FreeSlice(
                        sid,
                        node_id,
                        gpu_id,
                        kind,
                        memory_mb,
                        spec.gpu_model,
                        milli,
                        cu * milli / 1000,
                        power_w=power * milli / 1000,
                    )
                )
    return Pool(list(layout), slices, sum(s.milli for s in slices))


def node_states(pool: Pool, cpus_used: dict[int, float], mem_used: dict[int, int]) -> tuple:
    """The nodes as the portal's snapshot has them: headroom, rack, plane, NVLink pairs."""
    out = []
    for node_id, spec in enumerate(pool.nodes, start=1):
        links: frozenset[tuple[int, int]] = frozenset()
        if spec.nvlink:
            ids = [node_id * 100 + g for g in range(spec.gpu_count)]
            links = frozenset((a, b) for i, a in enumerate(ids) for b in ids[i + 1 :])
        out.append(
            NodeState(
                node_id,
                spec.name,
                True,
                spec.cpus - cpus_used.get(node_id, 0.0),
                spec.memory_mb - mem_used.get(node_id, 0),
                rack=spec.rack,
                network_plane="ib0" if spec.high_power else "eth0",
                high_power=spec.high_power,
                nvlink=links,
            )
        )
    return tuple(out)


def racks(
    pool: Pool, budgets: Iterable[tuple[str, float]], busy: Iterable[FreeSlice]
) -> tuple[Rack, ...]:
    """Racks with a power budget, as the portal's snapshot has them (the ``rack_power_budget_w``
    label); the draw is the busy slices' estimated power (the simulated GPUs draw nothing
    idle)."""
    budget = dict(budgets)
    if not budget:
        return ()
    rack_of = {node_id: spec.rack for node_id, spec in enumerate(pool.nodes, start=1)}
    draw: dict[str, float] = dict.fromkeys(budget, 0.0)
    for s in busy:
        rack = rack_of.get(s.node_id, "")
        if rack in draw:
            draw[rack] += s.power_w
    return tuple(Rack(name, budget[name], draw[name]) for name in sorted(budget))
