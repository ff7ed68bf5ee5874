"""A reported MIG layout checked against the tables (issue 37 item 2). Pure Python, no DB."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduling.engine import mig
from scheduling.engine.mig_check import LayoutProblem, Problem, ReportedInstance, check_layout

R = ReportedInstance
A100 = "NVIDIA A100-SXM4-80GB"


def test_a_layout_nvidia_smi_can_make_is_accepted() -> None:
    layout = [R("3g.40gb", 4), R("2g.20gb", 0), R("1g.10gb", 2), R("1g.10gb", 3)]
    assert check_layout(A100, layout) is None
    assert check_layout(A100, []) is None  # MIG on, nothing created yet: nothing offered


def test_starts_are_optional_when_the_profiles_fit_somewhere() -> None:
    assert check_layout(A100, [R("3g.40gb"), R("3g.40gb")]) is None
    assert check_layout(A100, [R("4g.40gb"), R("3g.40gb")]) is None
    assert check_layout(A100, [R("MIG 1g.10gb")] * 7) is None


@pytest.mark.parametrize(
    ("model", "layout", "problem"),
    [
        ("NVIDIA T4", [R("1g.5gb", 0)], LayoutProblem(Problem.UNKNOWN_MODEL)),
        ("NVIDIA H100 NVL", [], LayoutProblem(Problem.UNKNOWN_MODEL)),
        (A100, [R("1c.3g.40gb", 0)], LayoutProblem(Problem.UNKNOWN_PROFILE, "1c.3g.40gb")),
        (A100, [R("1g.5gb", 0)], LayoutProblem(Problem.UNKNOWN_PROFILE, "1g.5gb")),
        (A100, [R("1g.10gb")] * 8, LayoutProblem(Problem.TOO_MANY, "1g.10gb")),
        (A100, [R("4g.40gb"), R("4g.40gb")], LayoutProblem(Problem.TOO_MANY, "4g.40gb")),
        (A100, [R("3g.40gb", 2)], LayoutProblem(Problem.BAD_START, "3g.40gb", 2)),
        (A100, [R("3g.40gb", 0), R("2g.20gb", 2)], LayoutProblem(Problem.OVERLAP, "2g.20gb", 2)),
        (A100, [R("7g.80gb"), R("1g.10gb")], LayoutProblem(Problem.NO_ROOM)),
        (A100, [R("3g.40gb", 0), R("4g.40gb")], LayoutProblem(Problem.NO_ROOM)),
        ("NVIDIA A30", [R("1g.6gb+me", 0), R("2g.12gb+me", 2)], LayoutProblem(Problem.ENGINES)),
    ],
)
def test_a_layout_the_tables_do_not_allow_is_refused_with_its_reason(
    model: str, layout: list[ReportedInstance], problem: LayoutProblem
) -> None:
    assert check_layout(model, layout) == problem


def _tables() -> list[mig.GpuMigTable]:
    return list(mig.all_tables())


@st.composite
def placed_layouts(draw: st.DrawFn) -> tuple[mig.GpuMigTable, list[mig.PlacedInstance]]:
    """A layout built as nvidia-smi would: instances placed one by one where they fit."""
    table = draw(st.sampled_from(_tables()))
    placed: list[mig.PlacedInstance] = []
    for _ in range(draw(st.integers(0, 8))):
        free = mig.free_placements(table, placed)
        options = [(name, start) for name, starts in free.items() for start in starts]
        if not options:
            break
        name, start = draw(st.sampled_from(options))
        placed.append(mig.PlacedInstance(start, name))
    return table, placed


@settings(max_examples=200, deadline=None)
@given(placed_layouts(), st.booleans())
def test_every_layout_the_gpu_can_make_is_accepted_with_or_without_starts(
    given_layout: tuple[mig.GpuMigTable, list[mig.PlacedInstance]], starts_known: bool
) -> None:
    table, placed = given_layout
    reported = [R(i.profile, i.start if starts_known else None) for i in placed]
    assert check_layout(table.model, reported) is None


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(_tables()), st.data())
def test_a_refused_placed_layout_is_one_the_placement_rules_refuse(
    table: mig.GpuMigTable, data: st.DataObject
) -> None:
    """With every start reported, the check agrees with the engine's own placement rules."""
    starts = st.integers(0, table.memory_slices - 1)
    items = data.draw(st.lists(st.tuples(st.sampled_from(table.profile_names), starts), max_size=8))
    reported = [R(name, start) for name, start in items]
    placed = [mig.PlacedInstance(start, name) for name, start in items]
    accepted = check_layout(table.model, reported) is None
    assert accepted == mig.validate_layout(table, placed)
