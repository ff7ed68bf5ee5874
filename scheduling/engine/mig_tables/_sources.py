"""Shared source citations for the MIG tables (data only)."""

GUIDE_PROFILES = {
    "url": "https://docs.nvidia.com/datacenter/tesla/mig-user-guide/supported-mig-profiles.html",
    "section": "NVIDIA Multi-Instance GPU User Guide (v580), Supported MIG Profiles",
}
GUIDE_LGIPP = {
    "url": "https://docs.nvidia.com/datacenter/tesla/mig-user-guide/getting-started-with-mig.html",
    "section": (
        "NVIDIA Multi-Instance GPU User Guide (v580), Getting Started with MIG > "
        "List GPU Instance Profiles (`nvidia-smi mig -lgipp` example on A100-SXM4-40GB)"
    ),
}
NVML_PLACEMENT = {
    "url": "https://docs.nvidia.com/deploy/nvml-api/structnvmlGpuInstancePlacement__t.html",
    "section": (
        "NVML API Reference, nvmlGpuInstancePlacement_t: start = index of first occupied "
        "memory slice, size = number of memory slices occupied; creation fails on overlap"
    ),
}
