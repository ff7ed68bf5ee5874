"""The NVML probe: against a real driver when present, and field by field with a fake NVML."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pynvml
import pytest

from nodeagent.probe import NodeFacts
from nodeagent.probe.nvml import NvmlProbe, NvmlUnavailable, mig_profile_from_name


def _nvml_present() -> str | None:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as error:
        return f"no NVML on this machine ({error})"
    pynvml.nvmlShutdown()
    return None


@pytest.mark.skipif(_nvml_present() is not None, reason=_nvml_present() or "")
def test_real_nvml_inventory_and_metrics_have_the_protocol_shape() -> None:
    probe = NvmlProbe()
    try:
        gpus, metrics = probe.inventory(), probe.metrics()
    finally:
        probe.close()
    assert gpus, "NVML is present but lists no GPU"
    assert [m["uuid"] for m in metrics] == [g["uuid"] for g in gpus]
    for gpu in gpus:
        assert gpu["uuid"].startswith("GPU-") and gpu["memory_mb"] > 0
        assert gpu["simulated"] is False


def _not_supported(*_: Any) -> Any:
    raise pynvml.NVMLError_NotSupported()


@pytest.fixture
def fake_nvml(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """One A100 in MIG mode with two instances; temperature and power are not supported."""
    gpu, mig0, mig1 = object(), object(), object()
    names = {gpu: "NVIDIA A100-SXM4-80GB", mig0: "NVIDIA A100-SXM4-80GB MIG 3g.40gb",
             mig1: "NVIDIA A100-SXM4-80GB MIG 1g.10gb"}  # fmt: skip
    uuids = {gpu: "GPU-aaaa", mig0: "MIG-0000", mig1: "MIG-1111"}
    memory = {gpu: 81920, mig0: 40192, mig1: 9984}
    migs = [mig0, mig1]

    def mig_handle(_: Any, slot: int) -> Any:
        if slot >= len(migs):
            raise pynvml.NVMLError_NotFound()
        return migs[slot]

    fakes: dict[str, Any] = {
        "nvmlInit": lambda: None,
        "nvmlShutdown": lambda: None,
        "nvmlDeviceGetCount": lambda: 1,
        "nvmlDeviceGetHandleByIndex": lambda i: gpu,
        "nvmlDeviceGetUUID": lambda h: uuids[h],
        "nvmlDeviceGetName": lambda h: names[h].encode(),  # older bindings return bytes
        "nvmlDeviceGetPciInfo": lambda h: SimpleNamespace(busId="00000000:07:00.0"),
        "nvmlDeviceGetMemoryInfo": lambda h: SimpleNamespace(
            total=memory[h] * 1024 * 1024, used=1024 * 1024 * 1024
        ),
        "nvmlDeviceGetCudaComputeCapability": lambda h: (8, 0),
        "nvmlDeviceGetMigMode": lambda h: (pynvml.NVML_DEVICE_MIG_ENABLE, 1),
        "nvmlDeviceGetMaxMigDeviceCount": lambda h: 7,
        "nvmlDeviceGetMigDeviceHandleByIndex": mig_handle,
        "nvmlDeviceGetNvLinkState": _not_supported,
        "nvmlDeviceGetUtilizationRates": lambda h: SimpleNamespace(gpu=42, memory=10),
        "nvmlDeviceGetTemperature": _not_supported,
        "nvmlDeviceGetPowerUsage": lambda h: (_ for _ in ()).throw(pynvml.NVMLError_Unknown()),
    }
    for name, fake in fakes.items():
        monkeypatch.setattr(pynvml, name, fake)
    return fakes


def test_unsupported_fields_become_none_and_the_probe_carries_on(fake_nvml: dict[str, Any]) -> None:
    probe = NvmlProbe(facts=NodeFacts(cpu_count=8, memory_mb=1000))
    [gpu] = probe.inventory()
    assert gpu["uuid"] == "GPU-aaaa"
    assert gpu["name"] == "NVIDIA A100-SXM4-80GB"
    assert (gpu["memory_mb"], gpu["compute_capability"]) == (81920, "8.0")
    assert gpu["mig_mode"] is True and gpu["sharing"] == "mig"
    assert gpu["mig_instances"] == [
        {"uuid": "MIG-0000", "profile": "3g.40gb", "memory_mb": 40192},
        {"uuid": "MIG-1111", "profile": "1g.10gb", "memory_mb": 9984},
    ]
    assert gpu["nvlink_peers"] == []  # NVLink not supported: no peers, no crash
    assert gpu["pci_bus_id"] == "00000000:07:00.0"
    assert probe.metrics() == [
        {"uuid": "GPU-aaaa", "utilization_pct": 42.0, "memory_used_mb": 1024,
         "temperature_c": None, "power_w": None},
    ]  # fmt: skip


def test_missing_library_is_reported_in_plain_words(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_library() -> None:
        raise pynvml.NVMLError_LibraryNotFound()

    monkeypatch.setattr(pynvml, "nvmlInit", no_library)
    with pytest.raises(NvmlUnavailable, match="not available"):
        NvmlProbe()


def test_mig_profile_is_read_from_the_device_name() -> None:
    assert mig_profile_from_name("NVIDIA A100-SXM4-80GB MIG 2g.20gb") == "2g.20gb"
    assert mig_profile_from_name("Tesla T4") == "unknown"
