"""A30-24GB MIG profile table (data only)."""

from ._sources import GUIDE_PROFILES, NVML_PLACEMENT

TABLE = {
    "key": "a30-24gb",
    "model": "A30-24GB",
    "aliases": ["A30", "A30-24GB"],
    "total_memory_gb": 24,
    "memory_slices": 4,
    "compute_slices": 4,
    "sources": [
        dict(GUIDE_PROFILES, covers="profiles", table="A30 MIG Profiles (A30-24GB product)"),
        {
            "url": "(public GitHub notes found by code search; repository not identified)",
            "section": (
                "`sudo nvidia-smi mig -lgipp` on A30: Profile ID 14 {0,1,2,3}:1, ID 21 "
                "{0,1,2,3}:1, ID 5 {0,2}:2, ID 6 {0,2}:2, ID 0 {0}:4"
            ),
            "covers": "placements, profile ids",
        },
        dict(NVML_PLACEMENT, covers="placement semantics"),
    ],
    "notes": [
        "The guide notes 1g.6gb+me needs R470+ and 2g.12gb+me needs R525+ drivers.",
        "The guide lists 1g.6gb with 0 NVDECs; one `-lgip` dump shows DEC 1 for it. The "
        "guide's value is kept.",
        "Placements come from third-party `-lgipp` dumps, not from NVIDIA's guide.",
    ],
    # fmt: off
    "profiles": [
        {
            "name": "1g.6gb",
            "profile_id": 14,
            "compute_slices": 1,
            "memory_slices": 1,
            "memory_fraction": "1/4",
            "sm_fraction": "1/4",
            "l2_fraction": "1/4",
            "copy_engines": 1,
            "nvdec": 0,
            "nvjpg": 0,
            "ofa": 0,
            "max_count": 4,
            "placements": [0, 1, 2, 3],
        },
        {
            "name": "1g.6gb+me",
            "profile_id": 21,
            "compute_slices": 1,
            "memory_slices": 1,
            "memory_fraction": "1/4",
            "sm_fraction": "1/4",
            "l2_fraction": "1/4",
            "copy_engines": 1,
            "nvdec": 1,
            "nvjpg": 1,
            "ofa": 1,
            "max_count": 1,
            "placements": [0, 1, 2, 3],
        },
        {
            "name": "2g.12gb",
            "profile_id": 5,
            "compute_slices": 2,
            "memory_slices": 2,
            "memory_fraction": "2/4",
            "sm_fraction": "2/4",
            "l2_fraction": "2/4",
            "copy_engines": 2,
            "nvdec": 2,
            "nvjpg": 0,
            "ofa": 0,
            "max_count": 2,
            "placements": [0, 2],
        },
        {
            "name": "2g.12gb+me",
            "profile_id": 6,
            "compute_slices": 2,
            "memory_slices": 2,
            "memory_fraction": "2/4",
            "sm_fraction": "2/4",
            "l2_fraction": "2/4",
            "copy_engines": 2,
            "nvdec": 2,
            "nvjpg": 1,
            "ofa": 1,
            "max_count": 1,
            "placements": [0, 2],
        },
        {
            "name": "4g.24gb",
            "profile_id": 0,
            "compute_slices": 4,
            "memory_slices": 4,
            "memory_fraction": "Full",
            "sm_fraction": "4/4",
            "l2_fraction": "Full",
            "copy_engines": 4,
            "nvdec": 4,
            "nvjpg": 1,
            "ofa": 1,
            "max_count": 1,
            "placements": [0],
        },
    ],
    # fmt: on
}
