"""Reading the openb CSVs (Alibaba cluster-trace-gpu-v2023) into plain records."""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

MILLI = 1000


@dataclass(frozen=True)
class Pod:
    name: str
    cpu_milli: int
    memory_mib: int
    num_gpu: int
    gpu_milli: int  # per GPU; 1000 for whole GPUs (multi-GPU pods are always whole GPUs)
    gpu_spec: str  # "" = any model, else "A|B"

    @property
    def allowed_models(self) -> frozenset[str] | None:
        return frozenset(self.gpu_spec.split("|")) if self.gpu_spec else None

    @property
    def gpu_request(self) -> int:
        """Total GPU request in milli-GPUs."""
        return self.num_gpu * self.gpu_milli

    @property
    def is_share(self) -> bool:
        return self.num_gpu == 1 and self.gpu_milli < MILLI

    @property
    def kind(self) -> tuple[int, int, int, int, str]:
        """The pod's resource shape (what the scheduler sees; the name is not part of it)."""
        return (self.cpu_milli, self.memory_mib, self.num_gpu, self.gpu_milli, self.gpu_spec)


@dataclass(frozen=True)
class Node:
    name: str
    cpu_milli: int
    memory_mib: int
    num_gpu: int
    model: str  # "" for CPU-only nodes


def make_pod(name, cpu_milli, memory_mib, num_gpu, gpu_milli, gpu_spec="") -> Pod:
    num_gpu = int(num_gpu)
    gpu_milli = int(gpu_milli) if num_gpu else 0
    if num_gpu > 1:
        gpu_milli = MILLI  # multi-GPU pods take whole GPUs
    return Pod(str(name), int(cpu_milli), int(memory_mib), num_gpu, gpu_milli, gpu_spec or "")


def load_pods(path: str | Path) -> list[Pod]:
    with open(path, newline="") as f:
        return [
            make_pod(
                r["name"],
                r["cpu_milli"],
                r["memory_mib"],
                r["num_gpu"],
                r["gpu_milli"],
                (r.get("gpu_spec") or "").strip(),
            )
            for r in csv.DictReader(f)
        ]


def load_nodes(path: str | Path) -> list[Node]:
    nodes = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            model = (r.get("model") or "").strip()
            if model.lower() == "nan":
                model = ""
            gpus = int(r["gpu"] or 0)
            nodes.append(
                Node(
                    r["sn"], int(r["cpu_milli"]), int(r["memory_mib"]), gpus, model if gpus else ""
                )
            )
    return nodes
