"""The NVML probe: against a real driver when present, and field by field with a fake NVML."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest
from pydantic import BaseModel

from nodeagent.probe import NodeFacts
from nodeagent.probe.nvml import NvmlProbe, NvmlUnavailable, mig_profile_from_name
from nodeagent.protocol import XID_ERRORS_MAX, to_wire

LIVE_KEYS = {
    "uuid", "utilization_pct", "memory_used_mb", "temperature_c", "power_w", "power_limit_w",
    "fan_pct", "pcie_tx_kbps", "pcie_rx_kbps", "ecc_corrected_volatile",
    "ecc_uncorrected_volatile", "xid_errors", "health",
}  # fmt: skip
UNKNOWN_HEALTH = {
    "lost": False, "retired_pages_pending": None, "row_remap_pending": None,
    "row_remap_failed": None,
}  # fmt: skip


def wire(messages: Sequence[BaseModel]) -> list[dict[str, Any]]:
    """What the probe's inventory or metrics are on the wire to the portal."""
    return [to_wire(message) for message in messages]


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
        gpus, metrics = wire(probe.inventory()), wire(probe.metrics())
    finally:
        probe.close()
    assert gpus, "NVML is present but lists no GPU"
    assert [m["uuid"] for m in metrics] == [g["uuid"] for g in gpus]
    for gpu in gpus:
        assert gpu["uuid"].startswith("GPU-") and gpu["memory_mb"] > 0
        assert gpu["simulated"] is False
        assert set(gpu["pcie_topology"]) == {g["uuid"] for g in gpus} - {gpu["uuid"]}
    for m in metrics:
        # every key present, None where the card says nothing; slices only in MIG mode
        assert set(m) - {"slices"} == LIVE_KEYS
        assert m["xid_errors"] is None or all(isinstance(code, int) for code in m["xid_errors"])


def _not_supported(*_: Any) -> Any:
    raise pynvml.NVMLError_NotSupported()


def _unpatched(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every NVML call the probe makes that a test does not fake is unsupported."""
    for name in (
        "nvmlDeviceGetEnforcedPowerLimit", "nvmlDeviceGetPowerManagementLimit",
        "nvmlDeviceGetFanSpeed", "nvmlDeviceGetPcieThroughput", "nvmlDeviceGetTotalEccErrors",
        "nvmlDeviceGetSupportedEventTypes", "nvmlEventSetCreate", "nvmlDeviceRegisterEvents",
        "nvmlEventSetWait", "nvmlEventSetFree", "nvmlDeviceGetTopologyCommonAncestor",
        "nvmlDeviceGetCurrPcieLinkGeneration", "nvmlDeviceGetCurrPcieLinkWidth",
        "nvmlDeviceGetMaxPcieLinkGeneration", "nvmlDeviceGetMaxPcieLinkWidth",
        "nvmlDeviceGetRetiredPagesPendingStatus", "nvmlDeviceGetRemappedRows",
    ):  # fmt: skip
        monkeypatch.setattr(pynvml, name, _not_supported)


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
    _unpatched(monkeypatch)
    for name, fake in fakes.items():
        monkeypatch.setattr(pynvml, name, fake)
    return fakes


def test_unsupported_fields_become_none_and_the_probe_carries_on(fake_nvml: dict[str, Any]) -> None:
    probe = NvmlProbe(facts=NodeFacts(cpu_count=8, memory_mb=1000))
    [gpu] = wire(probe.inventory())
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
    assert (gpu["pcie_link_gen"], gpu["pcie_link_width"]) == (None, None)
    assert (gpu["pcie_link_gen_max"], gpu["pcie_link_width_max"]) == (None, None)
    assert gpu["pcie_topology"] == {}  # one GPU: no pairs
    assert wire(probe.metrics()) == [
        {"uuid": "GPU-aaaa", "utilization_pct": 42.0, "memory_used_mb": 1024,
         "temperature_c": None, "power_w": None, "power_limit_w": None, "fan_pct": None,
         "pcie_tx_kbps": None, "pcie_rx_kbps": None, "ecc_corrected_volatile": None,
         "ecc_uncorrected_volatile": None, "xid_errors": None,
         "slices": [  # per MIG instance: its memory in use; utilisation not per instance
             {"uuid": "MIG-0000", "memory_used_mb": 1024, "utilization_pct": None},
             {"uuid": "MIG-1111", "memory_used_mb": 1024, "utilization_pct": None},
         ],
         "health": UNKNOWN_HEALTH},
    ]  # fmt: skip
    probe.close()


def test_missing_library_is_reported_in_plain_words(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_library() -> None:
        raise pynvml.NVMLError_LibraryNotFound()

    monkeypatch.setattr(pynvml, "nvmlInit", no_library)
    with pytest.raises(NvmlUnavailable, match="not available"):
        NvmlProbe()


def test_mig_profile_is_read_from_the_device_name() -> None:
    assert mig_profile_from_name("NVIDIA A100-SXM4-80GB MIG 2g.20gb") == "2g.20gb"
    assert mig_profile_from_name("Tesla T4") == "unknown"


class TwoGpus:
    """A fake NVML with two GPUs: ``full`` reports everything, ``bare`` (a GeForce-like
    card) little: no enforced limit, no PCIe counters, no ECC, no XID events."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.full, self.bare = object(), object()
        self.uuids = {self.full: "GPU-full", self.bare: "GPU-bare"}
        self.events: list[Any] = []  # what nvmlEventSetWait hands out, oldest first
        self.registered: list[tuple[Any, int, Any]] = []
        self.freed: list[Any] = []
        self.waits: list[int] = []
        self.wait_error: pynvml.NVMLError | None = None
        self.event_set = object()
        handles = [self.full, self.bare]
        xid = pynvml.nvmlEventTypeXidCriticalError
        supported = {self.full: xid | pynvml.nvmlEventTypePState, self.bare: 0}

        def only(handle: Any, value: Any) -> Callable[..., Any]:
            def read(h: Any, *_: Any) -> Any:
                if h is not handle:
                    raise pynvml.NVMLError_NotSupported()
                return value

            return read

        def throughput(h: Any, counter: int) -> int:
            if h is not self.full:
                raise pynvml.NVMLError_NotSupported()
            return {pynvml.NVML_PCIE_UTIL_TX_BYTES: 123456, pynvml.NVML_PCIE_UTIL_RX_BYTES: 789}[
                counter
            ]

        def ecc(h: Any, error_type: int, counter: int) -> int:
            assert counter == pynvml.NVML_VOLATILE_ECC
            if h is not self.full:
                raise pynvml.NVMLError_NotSupported()
            return {pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED: 3,
                    pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED: 0}[error_type]  # fmt: skip

        def wait(event_set: Any, timeout_ms: int) -> Any:
            assert event_set is self.event_set
            self.waits.append(timeout_ms)
            if self.wait_error is not None:
                raise self.wait_error
            if not self.events:
                raise pynvml.NVMLError_Timeout()
            return self.events.pop(0)

        def topology(a: Any, b: Any) -> int:
            assert {a, b} == {self.full, self.bare}
            return pynvml.NVML_TOPOLOGY_HOSTBRIDGE

        fakes: dict[str, Any] = {
            "nvmlInit": lambda: None,
            "nvmlShutdown": lambda: None,
            "nvmlDeviceGetCount": lambda: 2,
            "nvmlDeviceGetHandleByIndex": lambda i: handles[i],
            "nvmlDeviceGetUUID": lambda h: self.uuids[h],
            "nvmlDeviceGetName": lambda h: "NVIDIA H100 80GB HBM3",
            "nvmlDeviceGetPciInfo": lambda h: SimpleNamespace(
                busId=f"00000000:{0x18 + handles.index(h):02X}:00.0"
            ),
            "nvmlDeviceGetMemoryInfo": lambda h: SimpleNamespace(
                total=81559 * 1024 * 1024, used=512 * 1024 * 1024
            ),
            "nvmlDeviceGetCudaComputeCapability": lambda h: (9, 0),
            "nvmlDeviceGetMigMode": _not_supported,
            "nvmlDeviceGetNvLinkState": _not_supported,
            "nvmlDeviceGetUtilizationRates": lambda h: SimpleNamespace(gpu=7, memory=1),
            "nvmlDeviceGetTemperature": lambda h, sensor: 41,
            "nvmlDeviceGetPowerUsage": lambda h: 123450,
            "nvmlDeviceGetEnforcedPowerLimit": only(self.full, 700000),
            "nvmlDeviceGetPowerManagementLimit": lambda h: 250000,
            "nvmlDeviceGetFanSpeed": only(self.bare, 55),  # the full one is passively cooled
            "nvmlDeviceGetPcieThroughput": throughput,
            "nvmlDeviceGetTotalEccErrors": ecc,
            "nvmlDeviceGetSupportedEventTypes": lambda h: supported[h],
            "nvmlEventSetCreate": lambda: self.event_set,
            "nvmlDeviceRegisterEvents": lambda h, kinds, es: self.registered.append((h, kinds, es)),
            "nvmlEventSetWait": wait,
            "nvmlEventSetFree": self.freed.append,
            "nvmlDeviceGetTopologyCommonAncestor": topology,
            "nvmlDeviceGetCurrPcieLinkGeneration": only(self.full, 5),
            "nvmlDeviceGetCurrPcieLinkWidth": only(self.full, 16),
            "nvmlDeviceGetMaxPcieLinkGeneration": lambda h: 5,
            "nvmlDeviceGetMaxPcieLinkWidth": _not_supported,
        }
        _unpatched(monkeypatch)
        for name, fake in fakes.items():
            monkeypatch.setattr(pynvml, name, fake)

    def xid(self, handle: Any, code: int) -> None:
        self.events.append(
            SimpleNamespace(
                device=handle, eventType=pynvml.nvmlEventTypeXidCriticalError, eventData=code
            )
        )


@pytest.fixture
def two_gpus(monkeypatch: pytest.MonkeyPatch) -> TwoGpus:
    return TwoGpus(monkeypatch)


def _probe() -> NvmlProbe:
    return NvmlProbe(facts=NodeFacts(cpu_count=8, memory_mb=1000))


def test_live_metrics_are_read_field_by_field_where_each_card_reports_them(
    two_gpus: TwoGpus,
) -> None:
    probe = _probe()
    full, bare = wire(probe.metrics())
    assert set(full) == set(bare) == LIVE_KEYS
    assert full == {
        "uuid": "GPU-full", "utilization_pct": 7.0, "memory_used_mb": 512, "temperature_c": 41.0,
        "power_w": 123.45, "power_limit_w": 700.0, "fan_pct": None, "pcie_tx_kbps": 123456,
        "pcie_rx_kbps": 789, "ecc_corrected_volatile": 3, "ecc_uncorrected_volatile": 0,
        "xid_errors": [], "health": UNKNOWN_HEALTH,
    }  # fmt: skip
    # No enforced limit: the management limit; no PCIe counters, ECC or XID events: None.
    assert bare == {
        "uuid": "GPU-bare", "utilization_pct": 7.0, "memory_used_mb": 512, "temperature_c": 41.0,
        "power_w": 123.45, "power_limit_w": 250.0, "fan_pct": 55.0, "pcie_tx_kbps": None,
        "pcie_rx_kbps": None, "ecc_corrected_volatile": None, "ecc_uncorrected_volatile": None,
        "xid_errors": None, "health": UNKNOWN_HEALTH,
    }  # fmt: skip
    probe.close()


def test_inventory_has_pcie_links_and_the_topology_of_each_pair(two_gpus: TwoGpus) -> None:
    full, bare = wire(_probe().inventory())
    assert (full["pcie_link_gen"], full["pcie_link_width"]) == (5, 16)
    assert (full["pcie_link_gen_max"], full["pcie_link_width_max"]) == (5, None)
    assert (bare["pcie_link_gen"], bare["pcie_link_width"]) == (None, None)
    assert full["pcie_topology"] == {"GPU-bare": "hostbridge"}
    assert bare["pcie_topology"] == {"GPU-full": "hostbridge"}


def test_a_pair_nvml_cannot_place_is_left_out_of_the_topology(
    two_gpus: TwoGpus, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pynvml, "nvmlDeviceGetTopologyCommonAncestor", _not_supported)
    gpus = wire(_probe().inventory())
    assert [gpu["pcie_topology"] for gpu in gpus] == [{}, {}]
    assert [gpu["pcie_link_gen"] for gpu in gpus] == [5, None]  # the rest is still read


def test_xid_errors_since_the_previous_read_are_reported_per_gpu(two_gpus: TwoGpus) -> None:
    probe = _probe()
    # Registered once, for XID only, on the GPU that supports XID events.
    assert two_gpus.registered == [
        (two_gpus.full, pynvml.nvmlEventTypeXidCriticalError, two_gpus.event_set)
    ]
    two_gpus.xid(two_gpus.full, 79)
    two_gpus.events.append(  # another kind of event is skipped
        SimpleNamespace(device=two_gpus.full, eventType=pynvml.nvmlEventTypePState, eventData=0)
    )
    two_gpus.xid(two_gpus.full, 48)
    first = {m["uuid"]: m["xid_errors"] for m in wire(probe.metrics())}
    assert first == {"GPU-full": [79, 48], "GPU-bare": None}
    assert set(two_gpus.waits) == {0}  # never waits for an event
    second = {m["uuid"]: m["xid_errors"] for m in wire(probe.metrics())}
    assert second == {"GPU-full": [], "GPU-bare": None}  # each XID reported once
    probe.close()
    assert two_gpus.freed == [two_gpus.event_set]


def test_xid_errors_are_capped_per_heartbeat(two_gpus: TwoGpus) -> None:
    probe = _probe()
    for _ in range(XID_ERRORS_MAX + 5):
        two_gpus.xid(two_gpus.full, 31)
    [full, _] = wire(probe.metrics())
    assert full["xid_errors"] == [31] * XID_ERRORS_MAX
    assert not two_gpus.events  # the rest were read and dropped, not left for later


def test_a_failing_event_set_leaves_the_other_metrics_alone(
    two_gpus: TwoGpus, caplog: pytest.LogCaptureFixture
) -> None:
    probe = _probe()
    two_gpus.wait_error = pynvml.NVMLError_GpuIsLost()
    with caplog.at_level(logging.WARNING, logger="nodeagent.probe.nvml"):
        full, bare = wire(probe.metrics())
    assert full["xid_errors"] == [] and bare["xid_errors"] is None
    assert full["power_limit_w"] == 700.0
    assert "XID events failed" in caplog.text


def test_no_event_set_means_xid_is_not_watched(
    two_gpus: TwoGpus, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pynvml, "nvmlEventSetCreate", _not_supported)
    probe = _probe()
    assert [m["xid_errors"] for m in wire(probe.metrics())] == [None, None]
    probe.close()
    assert two_gpus.freed == []


def test_a_gpu_whose_registration_is_refused_is_not_watched(
    two_gpus: TwoGpus, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(*_: Any) -> None:
        raise pynvml.NVMLError_NoPermission()

    monkeypatch.setattr(pynvml, "nvmlDeviceRegisterEvents", refuse)
    probe = _probe()
    assert [m["xid_errors"] for m in wire(probe.metrics())] == [None, None]
    assert two_gpus.freed == [two_gpus.event_set]  # the unused set is freed at once
