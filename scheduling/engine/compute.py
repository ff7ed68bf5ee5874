"""Normalised compute units (CU) per GPU model, and the part of a GPU a slice is (milli).

1 CU is the peak FP32 (non-tensor) throughput of one A100, 19.5 TFLOPS; a model's CU is its
peak FP32 TFLOPS / 19.5. The figures are NVIDIA's published datasheet peaks (A100, A30, H100,
H200, L4, L40S, T4, V100, A10, RTX A6000 datasheets, FP32 row); boost-clock peaks, not
measured throughput. Unknown models get 1.0 CU and say so (``known=False``).

A slice's ``milli`` is the part of its GPU it is: a MIG instance its compute slices over the
GPU's (from the MIG tables: 1g of an A100 is 1000/7), a share 1000 / shares per GPU, a whole
GPU 1000. Its CU is the GPU's CU scaled by the same fraction.
"""

from __future__ import annotations

import re

from .mig import UnknownGpuModel, table_for

MILLI = 1000

# Peak FP32 TFLOPS from NVIDIA's datasheets (SXM variants where there are two).
FP32_TFLOPS: dict[str, float] = {
    "A100": 19.5,
    "A30": 10.3,
    "A10": 31.2,
    "H100 PCIE": 51.0,
    "H100": 67.0,
    "H200": 67.0,
    "L4": 30.3,
    "L40S": 91.6,
    "T4": 8.1,
    "V100": 15.7,
    "RTX A6000": 38.7,
}
A100_FP32 = FP32_TFLOPS["A100"]


def _norm(name: str) -> str:
    s = re.sub(r"[^A-Z0-9]+", " ", name.upper().replace("NVIDIA", " "))
    return f" {' '.join(s.split())} "


def gpu_compute_units(model: str) -> tuple[float, bool]:
    """``(CU, known)`` for an NVML device name such as "NVIDIA A100-SXM4-80GB"."""
    n = _norm(model)
    # Longest names first, so "H100 PCIE" wins over "H100" and "L40S" over "L4".
    for key in sorted(FP32_TFLOPS, key=len, reverse=True):
        if f" {key} " in n or n.strip().startswith(key + " ") or n.strip() == key:
            return round(FP32_TFLOPS[key] / A100_FP32, 3), True
    return 1.0, False


def slice_milli(kind: str, gpu_model: str, mig_profile: str = "", shares: int = 1) -> int:
    """The part of its GPU a slice is, in milli-GPU."""
    if kind == "whole":
        return MILLI
    if kind == "share":
        return MILLI // max(1, shares)
    try:
        table = table_for(gpu_model)
        profile = table.profile(mig_profile)
    except (UnknownGpuModel, KeyError):
        # No table for the model: fall back on the profile name's "<n>g" over 7 slices.
        match = re.match(r"(\d+)g\.", mig_profile.removeprefix("MIG ").strip())
        return MILLI * int(match.group(1)) // 7 if match else MILLI
    return MILLI * profile.compute_slices // table.compute_slices
