"""MIG tables vs. their sources, and placement rules. Pure Python, no DB."""

import pytest

from scheduling.engine import mig
from scheduling.engine.mig import PlacedInstance as P

ALL_1G = [0, 1, 2, 3, 4, 5, 6]
# (name, profile id, memory slices, NVML-style memory fraction, max count, NVDEC/JPG/OFA,
#  placements) as in the MIG User Guide tables and `nvidia-smi mig -lgipp` outputs.
A100_40 = [
    ("1g.5gb", 19, 1, "1/8", 7, (0, 0, 0), ALL_1G),
    ("1g.5gb+me", 20, 1, "1/8", 1, (1, 1, 1), ALL_1G),
    ("1g.10gb", 15, 2, "1/8", 4, (1, 0, 0), [0, 2, 4, 6]),
    ("2g.10gb", 14, 2, "2/8", 3, (1, 0, 0), [0, 2, 4]),
    ("3g.20gb", 9, 4, "4/8", 2, (2, 0, 0), [0, 4]),
    ("4g.20gb", 5, 4, "4/8", 1, (2, 0, 0), [0]),
    ("7g.40gb", 0, 8, "Full", 1, (5, 1, 1), [0]),
]
A100_80 = [
    (n80, *rest)
    for n80, (_, *rest) in zip(
        ["1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"],
        A100_40,
        strict=True,
    )
]
H100_80 = [
    ("1g.10gb", 19, 1, "1/8", 7, (1, 1, 0), ALL_1G),
    ("1g.10gb+me", 20, 1, "1/8", 1, (1, 1, 1), ALL_1G),
    ("1g.20gb", 15, 2, "1/4", 4, (1, 1, 0), [0, 2, 4, 6]),
    ("2g.20gb", 14, 2, "2/8", 3, (2, 2, 0), [0, 2, 4]),
    ("3g.40gb", 9, 4, "4/8", 2, (3, 3, 0), [0, 4]),
    ("4g.40gb", 5, 4, "4/8", 1, (4, 4, 0), [0]),
    ("7g.80gb", 0, 8, "Full", 1, (7, 7, 1), [0]),
]
H200 = [
    (n, *rest)
    for n, (_, *rest) in zip(
        ["1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"],
        H100_80,
        strict=True,
    )
]
A30 = [
    ("1g.6gb", 14, 1, "1/4", 4, (0, 0, 0), [0, 1, 2, 3]),
    ("1g.6gb+me", 21, 1, "1/4", 1, (1, 1, 1), [0, 1, 2, 3]),
    ("2g.12gb", 5, 2, "2/4", 2, (2, 0, 0), [0, 2]),
    ("2g.12gb+me", 6, 2, "2/4", 1, (2, 1, 1), [0, 2]),
    ("4g.24gb", 0, 4, "Full", 1, (4, 1, 1), [0]),
]


def _check(table, expected, memory_slices, compute_slices):
    assert table.memory_slices == memory_slices
    assert table.compute_slices == compute_slices
    assert [p.name for p in table.profiles] == [e[0] for e in expected]
    for name, pid, mslices, mfrac, count, (dec, jpg, ofa), starts in expected:
        p = table.profile(name)
        assert (p.profile_id, p.memory_slices, p.memory_fraction, p.max_count) == (
            pid,
            mslices,
            mfrac,
            count,
        ), name
        assert (p.nvdec, p.nvjpg, p.ofa) == (dec, jpg, ofa), name
        assert list(p.placements) == starts, name
        assert p.compute_slices == int(name.split("g.")[0]), name
    assert table.sources and all(s["url"] and s["section"] for s in table.sources)
    assert any("supported-mig-profiles" in s["url"] for s in table.sources)


def test_a100_40gb_matches_source():
    _check(mig.table_for("NVIDIA A100-SXM4-40GB"), A100_40, 8, 7)


def test_a100_80gb_matches_source():
    _check(mig.table_for("NVIDIA A100-SXM4-80GB"), A100_80, 8, 7)


def test_a30_matches_source():
    _check(mig.table_for("NVIDIA A30"), A30, 4, 4)


def test_h100_80gb_matches_source():
    t = mig.table_for("NVIDIA H100 80GB HBM3")
    _check(t, H100_80, 8, 7)
    assert t.profile("7g.80gb").copy_engines == 8


def test_h200_matches_source():
    _check(mig.table_for("NVIDIA H200"), H200, 8, 7)


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("NVIDIA A100-SXM4-40GB", "a100-40gb"),
        ("NVIDIA A100-PCIE-40GB", "a100-40gb"),
        ("NVIDIA A100-SXM4-80GB", "a100-80gb"),
        ("NVIDIA A100 80GB PCIe", "a100-80gb"),
        ("NVIDIA A30", "a30-24gb"),
        ("NVIDIA H100 80GB HBM3", "h100-80gb"),
        ("NVIDIA H100 PCIe", "h100-80gb"),
        ("NVIDIA H200", "h200-141gb"),
        ("NVIDIA H200 NVL", "h200-141gb"),
        ("h100-80gb", "h100-80gb"),
    ],
)
def test_table_for_nvml_names(name, key):
    assert mig.table_for(name).key == key


@pytest.mark.parametrize(
    "name", ["NVIDIA H100 NVL", "NVIDIA GH200 480GB", "NVIDIA L40S", "Tesla T4", "NVIDIA A100"]
)
def test_table_for_unknown(name):
    with pytest.raises(mig.UnknownGpuModel):
        mig.table_for(name)


@pytest.fixture
def a100():
    return mig.table_for("NVIDIA A100-SXM4-80GB")


def test_4g_fits_after_3g_at_4(a100):
    assert mig.can_place(a100, [("3g.40gb", 4)], "4g.40gb") == 0
    assert mig.validate_layout(a100, [("3g.40gb", 4), ("4g.40gb", 0)])


def test_two_3g_fit_but_not_three(a100):
    first = mig.can_place(a100, [], "3g.40gb")
    second = mig.can_place(a100, [("3g.40gb", first)], "3g.40gb")
    assert {first, second} == {0, 4}
    assert mig.can_place(a100, [("3g.40gb", 0), ("3g.40gb", 4)], "3g.40gb") is None


def test_3g_occupies_four_memory_slices(a100):
    assert mig.occupied_slices(a100, [("3g.40gb", 0)]) == {0, 1, 2, 3}
    # a 3g at 0 leaves only starts >= 4 for 1g
    assert mig.free_placements(a100, [("3g.40gb", 0)])["1g.10gb"] == [4, 5, 6]


def test_7g_blocks_everything(a100):
    assert mig.occupied_slices(a100, [("7g.80gb", 0)]) == set(range(8))
    free = mig.free_placements(a100, [("7g.80gb", 0)])
    assert all(starts == [] for starts in free.values())
    assert mig.can_place(a100, [("1g.10gb", 6)], "7g.80gb") is None


def test_1g_20gb_only_even_starts(a100):
    assert list(a100.profile("1g.20gb").placements) == [0, 2, 4, 6]
    assert not mig.validate_layout(a100, [("1g.20gb", 1)])
    assert mig.can_place(a100, [("1g.10gb", 0)], "1g.20gb") in {2, 4, 6}
    assert mig.occupied_slices(a100, [("1g.20gb", 6)]) == {6, 7}


def test_free_placements_with_raw_slices(a100):
    free = mig.free_placements(a100, {0, 1, 2, 3})
    assert free["3g.40gb"] == [4]
    assert free["4g.40gb"] == []
    assert free["2g.20gb"] == [4]
    assert free["1g.20gb"] == [4, 6]


def test_max_count_enforced(a100):
    seven = [("1g.10gb", s) for s in range(7)]
    assert mig.validate_layout(a100, seven)
    assert mig.can_place(a100, seven, "1g.10gb") is None
    four = [("1g.20gb", s) for s in (0, 2, 4, 6)]
    assert mig.validate_layout(a100, four)
    assert not mig.validate_layout(a100, [*seven[:1], ("1g.10gb", 0)])


def test_h100_media_extension_profile_count_one():
    t = mig.table_for("NVIDIA H100 80GB HBM3")
    assert t.profile("1g.10gb+me").max_count == 1
    assert mig.can_place(t, [], "1g.10gb+me") in range(7)
    assert mig.can_place(t, [("1g.10gb+me", 0)], "1g.10gb+me") is None
    # the single OFA also rules out 7g alongside (already blocked by placement)
    assert mig.free_placements(t, [("1g.10gb+me", 3)])["1g.10gb+me"] == []
    assert mig.free_placements(t, [("1g.10gb+me", 3)])["1g.10gb"] == [0, 1, 2, 4, 5, 6]


def test_a30_media_engines_not_shared():
    t = mig.table_for("NVIDIA A30")
    # one JPEG/OFA on the A30: 1g.6gb+me and 2g.12gb+me can't coexist
    assert mig.can_place(t, [("1g.6gb+me", 0)], "2g.12gb+me") is None
    assert mig.can_place(t, [("1g.6gb+me", 0)], "2g.12gb") == 2
    assert mig.validate_layout(t, [("2g.12gb", 0), ("2g.12gb", 2)])


def test_balanced_layout_from_mig_parted(a100):
    # mig-parted all-balanced for A100-80GB: 2x 1g.10gb, 1x 2g.20gb, 1x 3g.40gb
    layout = []
    for prof in ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]:
        start = mig.can_place(a100, layout, prof)
        assert start is not None, prof
        layout.append((prof, start))
    assert mig.validate_layout(a100, layout)


@pytest.mark.parametrize("key", [t.key for t in mig.all_tables()])
def test_enumerate_partitions_are_valid_and_maximal(key):
    t = mig.table_for(key)
    layouts = list(mig.enumerate_partitions(t))
    assert len(layouts) == len(set(layouts))
    for layout in layouts:
        assert mig.validate_layout(t, layout)
        assert sum(t.profile(i.profile).compute_slices for i in layout) <= t.compute_slices
        assert all(v == [] for v in mig.free_placements(t, layout).values())
    full = t.full_profile
    assert (P(0, full.name),) in layouts


def test_enumerate_partitions_known_layouts(a100):
    layouts = set(mig.enumerate_partitions(a100, include_media=False))
    assert (P(0, "3g.40gb"), P(4, "3g.40gb")) in layouts
    assert (P(0, "4g.40gb"), P(4, "3g.40gb")) in layouts
    assert tuple(P(s, "1g.10gb") for s in range(7)) in layouts
    assert all(not i.profile.endswith("+me") for lay in layouts for i in lay)
