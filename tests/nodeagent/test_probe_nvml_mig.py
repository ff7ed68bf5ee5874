"""The NVML probe watching MIG instances (issue 37 item 3), against a fake NVML and a fake
``dcgmi``: each instance's placement, running CUDA processes, memory in use and, where
DCGM answers, its activity."""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest

from nodeagent.probe import NodeFacts
from nodeagent.probe.dcgm import DcgmActivity, parse_hierarchy, parse_samples
from nodeagent.probe.nvml import NvmlProbe
from nodeagent.protocol import to_wire

DISCOVERY = """\
+-------------------+--------------------------------------------------------------------+
| Instance Hierarchy                                                                     |
+===================+====================================================================+
| GPU 0             | GPU GPU-aaaa (EntityID: 0)                                         |
| -> I 0/2          | GPU Instance (EntityID: 0)                                         |
| -> CI 0/2/0       | Compute Instance (EntityID: 0)                                     |
| -> I 0/9          | GPU Instance (EntityID: 1)                                         |
| -> CI 0/9/0       | Compute Instance (EntityID: 1)                                     |
+-------------------+--------------------------------------------------------------------+
"""
DMON = """\
#Entity   GRACT
ID
GPU-I 0   0.875
GPU-I 1   N/A
"""


class FakeDcgmi:
    """Answers ``dcgmi`` commands from canned text and records what it was asked."""

    def __init__(self, discovery: str | None = DISCOVERY, dmon: str | None = DMON) -> None:
        self.answers = {"discovery": discovery, "dmon": dmon}
        self.asked: list[list[str]] = []

    def __call__(self, argv: Sequence[str]) -> str | None:
        self.asked.append(list(argv))
        return self.answers[argv[1]]


def _not_supported(*_: Any) -> Any:
    raise pynvml.NVMLError_NotSupported()


@pytest.fixture
def mig_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    """An A100 80GB with a 3g.40gb (GPU instance 2, at slice 0, two CUDA processes) and a
    1g.10gb (GPU instance 9, at slice 6, none)."""
    gpu, mig0, mig1 = object(), object(), object()
    names = {gpu: "NVIDIA A100-SXM4-80GB", mig0: "NVIDIA A100-SXM4-80GB MIG 3g.40gb",
             mig1: "NVIDIA A100-SXM4-80GB MIG 1g.10gb"}  # fmt: skip
    uuids = {gpu: "GPU-aaaa", mig0: "MIG-0000", mig1: "MIG-1111"}
    used = {gpu: 0, mig0: 5000, mig1: 12}
    instance_id = {mig0: 2, mig1: 9}
    start = {2: 0, 9: 6}
    processes = {mig0: [SimpleNamespace(pid=11), SimpleNamespace(pid=12)], mig1: []}

    def mig_handle(_: Any, slot: int) -> Any:
        if slot >= 2:
            raise pynvml.NVMLError_NotFound()
        return [mig0, mig1][slot]

    def instance_by_id(parent: Any, gi: int) -> Any:
        assert parent is gpu
        return ("gi", gi)

    fakes: dict[str, Any] = {
        "nvmlInit": lambda: None,
        "nvmlShutdown": lambda: None,
        "nvmlDeviceGetCount": lambda: 1,
        "nvmlDeviceGetHandleByIndex": lambda i: gpu,
        "nvmlDeviceGetUUID": lambda h: uuids[h],
        "nvmlDeviceGetName": lambda h: names[h],
        "nvmlDeviceGetPciInfo": lambda h: SimpleNamespace(busId="00000000:07:00.0"),
        "nvmlDeviceGetMemoryInfo": lambda h: SimpleNamespace(
            total=81920 * 1024 * 1024, used=used[h] * 1024 * 1024
        ),
        "nvmlDeviceGetCudaComputeCapability": lambda h: (8, 0),
        "nvmlDeviceGetMigMode": lambda h: (pynvml.NVML_DEVICE_MIG_ENABLE, 1),
        "nvmlDeviceGetMaxMigDeviceCount": lambda h: 7,
        "nvmlDeviceGetMigDeviceHandleByIndex": mig_handle,
        "nvmlDeviceGetComputeRunningProcesses": lambda h: processes[h],
        "nvmlDeviceGetGpuInstanceId": lambda h: instance_id[h],
        "nvmlDeviceGetGpuInstanceById": instance_by_id,
        "nvmlGpuInstanceGetInfo": lambda gi: SimpleNamespace(
            placement=SimpleNamespace(start=start[gi[1]], size=1)
        ),
        "nvmlDeviceGetUtilizationRates": _not_supported,  # as on a GPU in MIG mode
    }
    for name in dir(pynvml):  # every other call the probe makes is not supported
        call = getattr(pynvml, name)
        if name.startswith("nvml") and inspect.isfunction(call) and name not in fakes:
            monkeypatch.setattr(pynvml, name, _not_supported)
    for name, fake in fakes.items():
        monkeypatch.setattr(pynvml, name, fake)


def _probe(dcgm: DcgmActivity) -> NvmlProbe:
    return NvmlProbe(facts=NodeFacts(cpu_count=8, memory_mb=1000), dcgm=dcgm)


@pytest.mark.usefixtures("mig_nvml")
def test_each_instance_reports_its_start_for_the_layout_check() -> None:
    probe = _probe(DcgmActivity(FakeDcgmi(), binary=""))
    [gpu] = [to_wire(g) for g in probe.inventory()]
    assert [(m["uuid"], m["profile"], m["start"]) for m in gpu["mig_instances"]] == [
        ("MIG-0000", "3g.40gb", 0),
        ("MIG-1111", "1g.10gb", 6),
    ]


@pytest.mark.usefixtures("mig_nvml")
def test_each_instance_reports_its_cuda_processes_and_memory_without_dcgm() -> None:
    fake = FakeDcgmi()
    probe = _probe(DcgmActivity(fake, binary=""))  # no dcgmi on this node
    [metrics] = [to_wire(m) for m in probe.metrics()]
    assert metrics["utilization_pct"] is None
    assert metrics["slices"] == [
        {"uuid": "MIG-0000", "memory_used_mb": 5000, "utilization_pct": None, "processes": 2},
        {"uuid": "MIG-1111", "memory_used_mb": 12, "utilization_pct": None, "processes": 0},
    ]
    assert fake.asked == []  # nothing is run where the binary is missing


@pytest.mark.usefixtures("mig_nvml")
def test_dcgm_activity_is_each_instances_utilisation_where_dcgm_answers() -> None:
    fake = FakeDcgmi()
    probe = _probe(DcgmActivity(fake, binary="/usr/bin/dcgmi"))
    [metrics] = [to_wire(m) for m in probe.metrics()]
    by_uuid = {s["uuid"]: s for s in metrics["slices"]}
    assert by_uuid["MIG-0000"]["utilization_pct"] == 87.5  # GPU 0's instance 2 = entity 0
    assert by_uuid["MIG-1111"]["utilization_pct"] is None  # N/A: not sampled yet
    assert fake.asked == [
        ["/usr/bin/dcgmi", "discovery", "-c"],
        ["/usr/bin/dcgmi", "dmon", "-e", "1001", "-c", "1", "-i", "i:0,i:1"],
    ]


@pytest.mark.parametrize(
    ("discovery", "dmon"),
    [(None, DMON), (DISCOVERY, None), ("no hierarchy here", DMON), (DISCOVERY, "garbage\n")],
)
def test_dcgm_that_does_not_answer_gives_no_activity(
    discovery: str | None, dmon: str | None
) -> None:
    assert DcgmActivity(FakeDcgmi(discovery, dmon), binary="dcgmi").read() is None


def test_dcgm_output_is_parsed_by_entity() -> None:
    assert parse_hierarchy(DISCOVERY) == {0: (0, 2), 1: (0, 9)}
    assert parse_samples(DMON + "GPU-I 4   1.5\nGPU 0  0.5\n") == {0: 87.5}  # >1 is junk
