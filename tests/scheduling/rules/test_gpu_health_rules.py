"""The cordon rules (scheduling.rules.gpu_health), pure: by example and by hypothesis
properties. A fatal sign cordons, a harmless one never does, a sign that was already there
does not cordon again, nothing ever uncordons, and a node is cordoned by 3 failed starts
within 10 minutes after its last uncordon."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from scheduling.rules.gpu_health import (
    ECC_UNCORRECTED,
    FATAL_XIDS,
    HEALTH_FLAGS,
    LOST,
    NODE_FAILURE_WINDOW,
    NODE_FAILURES,
    ROW_REMAP_FAILED,
    gpu_causes,
    merge_causes,
    next_cordoned,
    node_should_cordon,
    xid_cause,
)

T0 = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)
WELL = {"xid_errors": [], "ecc_uncorrected_volatile": 0, "health": {"lost": False}}

xids = st.lists(st.integers(min_value=0, max_value=200), max_size=32)
flags = st.fixed_dictionaries(
    {}, optional={f: st.one_of(st.none(), st.booleans()) for f in HEALTH_FLAGS}
)
reports = st.fixed_dictionaries(
    {},
    optional={
        "xid_errors": st.one_of(st.none(), xids),
        "ecc_uncorrected_volatile": st.one_of(st.none(), st.integers(min_value=0, max_value=99)),
        "health": st.one_of(st.none(), flags),
    },
)


def test_xid_79_cordons_and_names_its_cause() -> None:
    assert gpu_causes(WELL, {**WELL, "xid_errors": [13, 79, 79]}) == ("xid:79",)


def test_a_harmless_xid_does_not_cordon() -> None:
    assert gpu_causes(WELL, {**WELL, "xid_errors": [13, 31, 43]}) == ()


def test_each_sign_is_a_cause_in_a_fixed_order() -> None:
    now = {
        "xid_errors": [94, 48],
        "ecc_uncorrected_volatile": 1,
        "health": {"lost": True, "row_remap_failed": True, "retired_pages_pending": None},
    }
    assert gpu_causes(WELL, now) == ("xid:94", "xid:48", ECC_UNCORRECTED, LOST, ROW_REMAP_FAILED)


def test_a_lasting_sign_cordons_once_a_new_one_again() -> None:
    sick = {**WELL, "ecc_uncorrected_volatile": 2, "health": {"row_remap_pending": True}}
    assert gpu_causes(WELL, sick) == (ECC_UNCORRECTED, "row_remap_pending")
    assert gpu_causes(sick, sick) == ()  # still there after the admin uncordoned it: known
    worse = {**sick, "ecc_uncorrected_volatile": 3}
    assert gpu_causes(sick, worse) == (ECC_UNCORRECTED,)


def test_an_older_agent_without_health_is_judged_on_what_it_sends() -> None:
    assert gpu_causes(None, {"uuid": "GPU-old", "utilization_pct": 3.0}) == ()
    assert gpu_causes(None, {"xid_errors": None, "ecc_uncorrected_volatile": None}) == ()


@given(before=reports, now=reports)
def test_every_cause_is_a_fatal_sign_in_the_new_report(before, now) -> None:
    for cause in gpu_causes(before, now):
        if cause.startswith("xid:"):
            code = int(cause.removeprefix("xid:"))
            assert code in FATAL_XIDS and code in (now.get("xid_errors") or [])
        elif cause == ECC_UNCORRECTED:
            assert (now.get("ecc_uncorrected_volatile") or 0) > (
                before.get("ecc_uncorrected_volatile") or 0
            )
        else:
            assert cause in HEALTH_FLAGS and (now.get("health") or {}).get(cause) is True
            assert (before.get("health") or {}).get(cause) is not True
    assert len(set(gpu_causes(before, now))) == len(gpu_causes(before, now))


@given(before=reports, now=reports, code=st.sampled_from(sorted(FATAL_XIDS)))
def test_any_fatal_xid_cordons_whatever_else_the_report_says(before, now, code) -> None:
    report = {**now, "xid_errors": [*(now.get("xid_errors") or []), code]}
    assert xid_cause(code) in gpu_causes(before, report)
    assert next_cordoned(False, gpu_causes(before, report))


@given(now=reports)
def test_a_report_the_same_as_the_last_cordons_only_for_its_xids(now) -> None:
    causes = gpu_causes(now, now)
    assert all(c.startswith("xid:") for c in causes)


@given(cordoned=st.booleans(), history=st.lists(st.tuples(reports, reports), max_size=20))
def test_a_cordon_never_lifts_by_itself(cordoned, history) -> None:
    state = cordoned
    for before, now in history:
        after = next_cordoned(state, gpu_causes(before, now))
        assert after >= state  # once cordoned, every later report leaves it cordoned
        state = after
    assert state == (cordoned or any(gpu_causes(b, n) for b, n in history))


@given(stored=st.lists(st.sampled_from(["xid:79", "lost", ECC_UNCORRECTED]), unique=True),
       new=st.lists(st.sampled_from(["xid:79", "xid:48", "lost"])))  # fmt: skip
def test_merged_causes_keep_the_first_and_add_each_new_once(stored, new) -> None:
    merged = merge_causes(",".join(stored), new).split(",") if stored or new else []
    assert merged[: len(stored)] == stored
    assert set(merged) == set(stored) | set(new) and len(merged) == len(set(merged))


def test_three_failed_starts_in_ten_minutes_cordon_the_node() -> None:
    minute = timedelta(minutes=1)
    assert node_should_cordon([T0, T0 + 4 * minute, T0 + 9 * minute], T0 + 9 * minute)
    assert not node_should_cordon([T0, T0 + 4 * minute], T0 + 9 * minute)
    # spread over more than ten minutes: the first no longer counts
    assert not node_should_cordon([T0, T0 + 6 * minute, T0 + 11 * minute], T0 + 11 * minute)
    # failures before the admin's uncordon do not count again
    assert not node_should_cordon(
        [T0, T0 + minute, T0 + 3 * minute], T0 + 3 * minute, cleared_at=T0 + 2 * minute
    )


offsets = st.lists(st.integers(min_value=0, max_value=3600), max_size=12)


@given(offsets=offsets, now_s=st.integers(min_value=0, max_value=3600))
def test_the_node_rule_counts_exactly_the_failures_in_the_window(offsets, now_s) -> None:
    now = T0 + timedelta(seconds=now_s)
    times = [T0 + timedelta(seconds=s) for s in offsets]
    inside = [t for t in times if now - NODE_FAILURE_WINDOW < t <= now]
    assert node_should_cordon(times, now) == (len(inside) >= NODE_FAILURES)
    assert node_should_cordon(list(reversed(times)), now) == node_should_cordon(times, now)


@given(offsets=offsets, extra=st.integers(min_value=0, max_value=3600))
def test_one_more_failure_never_uncordons_a_node(offsets, extra) -> None:
    now = T0 + timedelta(seconds=3600)
    times = [T0 + timedelta(seconds=s) for s in offsets]
    if node_should_cordon(times, now):
        assert node_should_cordon([*times, T0 + timedelta(seconds=extra)], now)
