"""A100-SXM4-80GB / A100 80GB PCIe MIG profile table (data only)."""

from ._sources import GUIDE_LGIPP, GUIDE_PROFILES, NVML_PLACEMENT

TABLE = {
    "key": "a100-80gb",
    "model": "A100-SXM4-80GB",
    "aliases": ["A100-SXM4-80GB", "A100-PCIE-80GB", "A100 80GB PCIE"],
    "total_memory_gb": 80,
    "memory_slices": 8,
    "compute_slices": 7,
    "sources": [
        dict(
            GUIDE_PROFILES,
            covers="profiles",
            table=(
                "Table 6: GPU Instance Profiles on A100, plus the note above it: 'For "
                "A100-SXM4-80GB, the profile names will change according to the memory "
                "proportion - for example, 1g.10gb, 1g.10gb+me, 1g.20gb, 2g.20gb, 3g.40gb, "
                "4g.40gb, 7g.80gb respectively.'"
            ),
        ),
        dict(GUIDE_LGIPP, covers="placements (A100 / GA100; same profile ids)"),
        {
            "url": "https://github.com/NVIDIA/DCGM/issues/138",
            "section": (
                "`nvidia-smi mig -lgi` on an 80GB MIG GPU: 1g.10gb (id 19) at 2:1 and 3:1, "
                "2g.20gb (id 14) at 0:2, 3g.40gb (id 9) at 4:4"
            ),
            "covers": "corroboration of placements and sizes",
        },
        dict(NVML_PLACEMENT, covers="placement semantics"),
    ],
    "notes": [
        "Values are the A100 table with the 80GB names the guide gives; the guide has no "
        "separate 80GB table.",
        "No `-lgipp` dump from an A100-80GB was found; placements are the A100-40GB ones "
        "(same GA100 die and profile ids), corroborated only by the DCGM issue's `-lgi` "
        "output, which does not name the GPU model.",
    ],
    # fmt: off
    "profiles": [
        {
            "name": "1g.10gb",
            "profile_id": 19,
            "compute_slices": 1,
            "memory_slices": 1,
            "memory_fraction": "1/8",
            "sm_fraction": "1/7",
            "l2_fraction": "1/8",
            "copy_engines": 1,
            "nvdec": 0,
            "nvjpg": 0,
            "ofa": 0,
            "max_count": 7,
            "placements": [0, 1, 2, 3, 4, 5, 6],
        },
        {
            "name": "1g.10gb+me",
            "profile_id": 20,
            "compute_slices": 1,
            "memory_slices": 1,
            "memory_fraction": "1/8",
            "sm_fraction": "1/7",
            "l2_fraction": "1/8",
            "copy_engines": 1,
            "nvdec": 1,
            "nvjpg": 1,
            "ofa": 1,
            "max_count": 1,
            "placements": [0, 1, 2, 3, 4, 5, 6],
        },
        {
            "name": "1g.20gb",
            "profile_id": 15,
            "compute_slices": 1,
            "memory_slices": 2,
            "memory_fraction": "1/8",
            "sm_fraction": "1/7",
            "l2_fraction": "1/8",
            "copy_engines": 1,
            "nvdec": 1,
            "nvjpg": 0,
            "ofa": 0,
            "max_count": 4,
            "placements": [0, 2, 4, 6],
        },
        {
            "name": "2g.20gb",
            "profile_id": 14,
            "compute_slices": 2,
            "memory_slices": 2,
            "memory_fraction": "2/8",
            "sm_fraction": "2/7",
            "l2_fraction": "2/8",
            "copy_engines": 2,
            "nvdec": 1,
            "nvjpg": 0,
            "ofa": 0,
            "max_count": 3,
            "placements": [0, 2, 4],
        },
        {
            "name": "3g.40gb",
            "profile_id": 9,
            "compute_slices": 3,
            "memory_slices": 4,
            "memory_fraction": "4/8",
            "sm_fraction": "3/7",
            "l2_fraction": "4/8",
            "copy_engines": 3,
            "nvdec": 2,
            "nvjpg": 0,
            "ofa": 0,
            "max_count": 2,
            "placements": [0, 4],
        },
        {
            "name": "4g.40gb",
            "profile_id": 5,
            "compute_slices": 4,
            "memory_slices": 4,
            "memory_fraction": "4/8",
            "sm_fraction": "4/7",
            "l2_fraction": "4/8",
            "copy_engines": 4,
            "nvdec": 2,
            "nvjpg": 0,
            "ofa": 0,
            "max_count": 1,
            "placements": [0],
        },
        {
            "name": "7g.80gb",
            "profile_id": 0,
            "compute_slices": 7,
            "memory_slices": 8,
            "memory_fraction": "Full",
            "sm_fraction": "7/7",
            "l2_fraction": "Full",
            "copy_engines": 7,
            "nvdec": 5,
            "nvjpg": 1,
            "ofa": 1,
            "max_count": 1,
            "placements": [0],
        },
    ],
    # fmt: on
}
