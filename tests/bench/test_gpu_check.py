"""bench.gpu_check without a GPU: every row skipped for the missing driver, exit 0, one table."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pynvml
import pytest

from bench import gpu_check
from nodeagent.protocol import GpuInventory

ROOT = Path(__file__).resolve().parent.parent.parent


def _nvml_present() -> bool:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return False
    pynvml.nvmlShutdown()
    return True


@pytest.mark.skipif(_nvml_present(), reason="an NVIDIA driver is here: the rows would run")
def test_without_a_driver_every_row_is_skipped_and_it_exits_0() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.gpu_check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    rows = lines[:5]
    assert [row.split("  ")[0] for row in rows] == [
        "NVML probe: inventory",
        "NVML probe: metrics",
        "MIG mode and instances",
        "CUDA matmul (PyTorch)",
        "MPS: two clients, memory cap",
    ]
    assert all("skipped: no NVIDIA driver" in row for row in rows)
    assert "no NVIDIA driver on this machine: nothing was checked on a GPU." in done.stdout
    assert done.stderr == ""


def _gpu(mig_mode: bool) -> GpuInventory:
    return GpuInventory(
        uuid="GPU-aaaa", index=0, name="NVIDIA H100", memory_mb=81559, compute_capability="9.0",
        mig_mode=mig_mode, mig_instances=[], nvlink_peers=[], pci_bus_id="", sharing="whole",
        simulated=False,
    )  # fmt: skip


def test_the_mps_row_says_why_it_cannot_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-cuda-mps-control
    row = gpu_check.run_check("mps", lambda: gpu_check.mps_text([_gpu(False)], 2048))
    assert (row.status, row.detail) == (
        "skipped",
        "nvidia-cuda-mps-control is not installed (NVIDIA driver compute utilities)",
    )
    program = tmp_path / gpu_check.MPS_CONTROL
    program.write_text("#!/bin/sh\nexit 0\n")
    program.chmod(0o755)
    monkeypatch.setattr(gpu_check, "torch", None)
    row = gpu_check.run_check("mps", lambda: gpu_check.mps_text([_gpu(False)], 2048))
    assert (row.status, row.detail) == ("skipped", gpu_check.TORCH_HINT)


def test_a_failed_row_makes_the_exit_status_1(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken() -> str:
        raise gpu_check.Failed("the over-cap allocation was NOT refused")

    monkeypatch.setattr(gpu_check, "checks", lambda cap_mb: [gpu_check.run_check("MPS", broken)])
    assert gpu_check.main([]) == 1
    assert gpu_check.table([gpu_check.run_check("MPS", broken)]) == (
        "MPS  failed: the over-cap allocation was NOT refused"
    )


def test_mig_is_only_read() -> None:
    assert gpu_check.mig_text([_gpu(False)]) == "GPU 0: MIG off (nothing changed)"
