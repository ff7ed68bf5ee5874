"""The idle rules and a MIG instance running CUDA (issue 37 item 3): NVML has no utilisation
per MIG instance, so the agent's GPU figure for such a desktop is None or stale; a CUDA
process on its instance is use, and such a desktop is never warned or suspended."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scheduling.rules.idle_rules import Activity, Context, Idle, Policy, Sample, Track, step

pytestmark = pytest.mark.lifecycle

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
MIN = timedelta(minutes=1)


def quiet_mig_desktop(minutes: int) -> Activity:
    """Started ``minutes`` ago, no input, a viewer never connected, the agent's samples
    every minute with no GPU figure (MIG) and an idle CPU."""
    return Activity(
        started_at=T0,
        samples=tuple(Sample(T0 + m * MIN, None, 1.0) for m in range(minutes + 1)),
    )


def test_a_quiet_mig_desktop_without_cuda_is_warned_then_suspended() -> None:
    warned = step(Track(), quiet_mig_desktop(40), Policy(), Context(), T0 + 40 * MIN)
    assert warned == Track(Idle.WARNED, T0 + 40 * MIN)
    suspended = step(warned, quiet_mig_desktop(55), Policy(), Context(), T0 + 55 * MIN)
    assert suspended.state == Idle.SUSPENDED


def test_a_mig_desktop_whose_instance_runs_cuda_is_not_suspended_without_input() -> None:
    busy = Context(cuda_running=True)
    warned = Track(Idle.WARNED, T0 + 40 * MIN)
    # The warning was given while no process ran; a CUDA process now resets it.
    after = step(warned, quiet_mig_desktop(55), Policy(), busy, T0 + 55 * MIN)
    assert after == Track(Idle.ACTIVE, T0 + 55 * MIN)
    assert step(Track(), quiet_mig_desktop(600), Policy(), busy, T0 + 600 * MIN).state == (
        Idle.ACTIVE
    )


@given(
    state=st.sampled_from([Idle.ACTIVE, Idle.IDLE, Idle.WARNED]),
    since=st.integers(0, 600),
    now=st.integers(0, 2000),
    inputs=st.none() | st.integers(0, 2000),
    viewers=st.integers(0, 3),
    gpu=st.none() | st.floats(0, 100),
    cpu=st.none() | st.floats(0, 100),
    needs_viewer=st.booleans(),
    thesis=st.booleans(),
)
def test_a_running_cuda_process_is_never_warned_or_suspended(
    state: Idle,
    since: int,
    now: int,
    inputs: int | None,
    viewers: int,
    gpu: float | None,
    cpu: float | None,
    needs_viewer: bool,
    thesis: bool,
) -> None:
    at = T0 + now * MIN
    activity = Activity(
        started_at=T0,
        last_input_at=None if inputs is None or inputs > now else T0 + inputs * MIN,
        viewers=viewers,
        samples=tuple(Sample(T0 + m * MIN, gpu, cpu) for m in range(max(0, now - 20), now + 1)),
    )
    policy = Policy(gpu_needs_viewer=needs_viewer)
    track = Track(state, T0 + min(since, now) * MIN)
    verdict = step(track, activity, policy, Context(thesis=thesis, cuda_running=True), at)
    assert verdict.state == Idle.ACTIVE
