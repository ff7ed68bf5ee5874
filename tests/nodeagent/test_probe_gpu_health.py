"""The NVML probe's GPU health (nodeagent.probe.gpu_health) against a fake NVML: a lost or
vanished GPU, pages retired or rows remapped waiting for a reset, a card that says nothing."""

from __future__ import annotations

from typing import Any

import pynvml
import pytest

from nodeagent.probe.gpu_health import read_health
from nodeagent.protocol import GpuHealth

GPU = object()


def _fake(monkeypatch: pytest.MonkeyPatch, **calls: Any) -> None:
    def answer(name: str) -> Any:
        def call(handle: Any) -> Any:
            assert handle is GPU
            value = calls[name]
            if isinstance(value, type) and issubclass(value, Exception):
                raise value()
            return value

        return call

    for name in calls:
        monkeypatch.setattr(pynvml, name, answer(name))


def test_a_healthy_gpu_reports_nothing_pending(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake(
        monkeypatch,
        nvmlDeviceGetUUID="GPU-aaaa",
        nvmlDeviceGetRetiredPagesPendingStatus=pynvml.NVML_FEATURE_DISABLED,
        nvmlDeviceGetRemappedRows=(0, 0, 0, 0),
    )
    assert read_health(GPU, "GPU-aaaa") == GpuHealth(
        lost=False, retired_pages_pending=False, row_remap_pending=False, row_remap_failed=False
    )


def test_pending_retirement_and_remap_are_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake(
        monkeypatch,
        nvmlDeviceGetUUID=b"GPU-aaaa",  # older bindings answer bytes
        nvmlDeviceGetRetiredPagesPendingStatus=pynvml.NVML_FEATURE_ENABLED,
        nvmlDeviceGetRemappedRows=(1, 2, 1, 1),
    )
    health = read_health(GPU, "GPU-aaaa")
    assert health.retired_pages_pending and health.row_remap_pending and health.row_remap_failed
    assert not health.lost


def test_a_card_without_them_leaves_them_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake(
        monkeypatch,
        nvmlDeviceGetUUID="GPU-aaaa",
        nvmlDeviceGetRetiredPagesPendingStatus=pynvml.NVMLError_NotSupported,
        nvmlDeviceGetRemappedRows=pynvml.NVMLError_NotSupported,
    )
    assert read_health(GPU, "GPU-aaaa") == GpuHealth(lost=False)


@pytest.mark.parametrize("failing", ["nvmlDeviceGetUUID", "nvmlDeviceGetRemappedRows"])
def test_a_gpu_nvml_lost_is_lost(monkeypatch: pytest.MonkeyPatch, failing: str) -> None:
    calls: dict[str, Any] = {
        "nvmlDeviceGetUUID": "GPU-aaaa",
        "nvmlDeviceGetRetiredPagesPendingStatus": pynvml.NVML_FEATURE_DISABLED,
        "nvmlDeviceGetRemappedRows": (0, 0, 0, 0),
    }
    calls[failing] = pynvml.NVMLError_GpuIsLost
    _fake(monkeypatch, **calls)
    assert read_health(GPU, "GPU-aaaa") == GpuHealth(lost=True)


def test_a_gpu_that_vanished_is_lost(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake(
        monkeypatch,
        nvmlDeviceGetUUID="GPU-bbbb",  # the handle names another card now
        nvmlDeviceGetRetiredPagesPendingStatus=pynvml.NVML_FEATURE_DISABLED,
        nvmlDeviceGetRemappedRows=(0, 0, 0, 0),
    )
    assert read_health(GPU, "GPU-aaaa").lost
