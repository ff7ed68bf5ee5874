"""The idle policy's pure decision (``scheduling.rules.idle_rules.step``), driven by synthetic
input, GPU and CPU series a minute apart, as the beat task applies it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from scheduling.rules.idle_rules import Activity, Context, Idle, Policy, Sample, Track, step

pytestmark = pytest.mark.lifecycle

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
MIN = timedelta(minutes=1)


def series(minutes: int, gpu: float | None = 0.0, cpu: float | None = 1.0, start: int = 0):
    """One sample a minute from T0 + ``start`` minutes, for ``minutes`` minutes."""
    return tuple(Sample(T0 + (start + m) * MIN, gpu, cpu) for m in range(minutes))


def run(
    samples_until: int,
    *,
    samples=None,
    inputs=(),
    viewers: int = 0,
    policy: Policy | None = None,
    context: Context | None = None,
    track: Track | None = None,
    start: int = 0,
):
    """Step every minute from ``start`` to ``samples_until`` (inclusive), as the beat does,
    the agent's samples arriving as time passes; returns each minute's verdict."""
    samples = samples if samples is not None else series(samples_until + 1)
    policy = policy or Policy()
    context = context or Context()
    track = track or Track()
    verdicts = {}
    for minute in range(start, samples_until + 1):
        now = T0 + minute * MIN
        seen = tuple(s for s in samples if s.at <= now)
        typed = [T0 + m * MIN for m in inputs if T0 + m * MIN <= now]
        activity = Activity(
            started_at=T0,
            last_input_at=max(typed) if typed else None,
            viewers=viewers,
            samples=seen,
        )
        track = step(track, activity, policy, context, now)
        verdicts[minute] = track
    return verdicts


def test_quiet_desktop_goes_idle_then_warned_then_suspended_then_ended():
    verdicts = run(46)
    assert verdicts[9].state == Idle.ACTIVE
    assert verdicts[10] == Track(Idle.IDLE, T0 + 10 * MIN)
    assert verdicts[29].state == Idle.IDLE and verdicts[29].since == T0 + 10 * MIN
    assert verdicts[30] == Track(Idle.WARNED, T0 + 30 * MIN)
    assert verdicts[44] == Track(Idle.WARNED, T0 + 30 * MIN)  # the warning stands 15 minutes
    assert verdicts[45] == Track(Idle.SUSPENDED, T0 + 45 * MIN)

    suspended = verdicts[45]
    nothing = Activity(started_at=T0)  # the desktop is stopped: no samples, no input
    day_later = T0 + 45 * MIN + timedelta(hours=24)
    assert step(suspended, nothing, Policy(), Context(), day_later - MIN) == suspended
    assert step(suspended, nothing, Policy(), Context(), day_later) == Track(Idle.ENDED, day_later)
    ended = Track(Idle.ENDED, day_later)
    assert step(ended, nothing, Policy(), Context(), day_later + MIN) == ended


def test_input_after_the_warning_resets_to_active_from_the_moment_of_the_input():
    verdicts = run(80, inputs=[40])
    assert verdicts[39].state == Idle.WARNED
    assert verdicts[40] == Track(Idle.ACTIVE, T0 + 40 * MIN)
    assert verdicts[49].state == Idle.ACTIVE
    assert verdicts[50].state == Idle.IDLE  # quiet again, counted from the input
    assert verdicts[70] == Track(Idle.WARNED, T0 + 70 * MIN)
    assert all(v.state != Idle.SUSPENDED for v in verdicts.values())


def test_input_now_and_then_keeps_a_desktop_active():
    verdicts = run(120, inputs=range(0, 121, 9))
    assert {v.state for v in verdicts.values()} == {Idle.ACTIVE}


def test_a_busy_gpu_without_input_keeps_the_desktop_until_the_gpu_goes_quiet():
    samples = series(60, gpu=80.0) + series(61, gpu=2.0, start=60)
    verdicts = run(120, samples=samples)
    assert {verdicts[m].state for m in range(0, 69)} == {Idle.ACTIVE}
    assert verdicts[69].state == Idle.IDLE  # the last busy sample was at minute 59
    assert verdicts[89] == Track(Idle.WARNED, T0 + 89 * MIN)
    assert verdicts[104].state == Idle.SUSPENDED


def test_gpu_at_the_threshold_is_busy_and_just_below_it_is_quiet():
    assert run(40, samples=series(41, gpu=5.0))[40].state == Idle.ACTIVE
    assert run(40, samples=series(41, gpu=4.9))[40].state == Idle.WARNED


def test_a_busy_cpu_counts_unless_the_policy_ignores_the_cpu():
    busy_cpu = series(41, gpu=0.0, cpu=90.0)
    assert run(40, samples=busy_cpu)[40].state == Idle.ACTIVE
    ignoring = Policy(cpu_idle_pct=None)
    assert run(40, samples=busy_cpu, policy=ignoring)[40].state == Idle.WARNED


def test_a_viewer_connected_without_input_is_not_activity():
    assert run(40, viewers=1)[40].state == Idle.WARNED


def test_thesis_training_with_a_busy_gpu_and_nobody_connected_is_never_idle():
    strict = Policy(gpu_needs_viewer=True)  # a busy GPU counts only while someone watches
    training = series(200, gpu=97.0, cpu=3.0)
    hobby = run(199, samples=training, policy=strict)
    assert hobby[30].state == Idle.WARNED and hobby[45].state == Idle.SUSPENDED
    thesis = run(199, samples=training, policy=strict, context=Context(thesis=True))
    assert {v.state for v in thesis.values()} == {Idle.ACTIVE}
    watched = run(199, samples=training, policy=strict, viewers=1)
    assert {v.state for v in watched.values()} == {Idle.ACTIVE}


def test_a_booked_class_inside_its_window_is_never_idle_and_is_judged_after_it():
    in_class = run(120, context=Context(in_class=True))
    assert {v.state for v in in_class.values()} == {Idle.ACTIVE}
    # The class is over at minute 120: the quiet since the start counts from then on.
    after = run(121, track=in_class[120], start=121)
    assert after[121] == Track(Idle.WARNED, T0 + 121 * MIN)


def test_no_fresh_utilisation_sample_means_not_judged():
    stale = series(5)  # the agent stopped reporting at minute 4
    verdicts = run(60, samples=stale)
    assert {v.state for v in verdicts.values()} == {Idle.ACTIVE}
    # and a warned desktop whose reports stop is not suspended blindly
    warned = run(35)[35]
    assert warned.state == Idle.WARNED
    blind = Activity(started_at=T0, samples=series(36))
    later = T0 + 60 * MIN
    assert step(warned, blind, Policy(), Context(), later).state == Idle.ACTIVE


def test_a_policy_turned_off_never_finds_a_desktop_idle():
    verdicts = run(60, policy=Policy(enabled=False))
    assert set(verdicts.values()) == {Track(Idle.ACTIVE, None)}  # never changed: no time


def test_short_policy_times_scale_every_step():
    quick = Policy(
        idle_after=timedelta(minutes=1),
        warn_after=timedelta(minutes=2),
        suspend_after=timedelta(minutes=1),
    )
    verdicts = run(3, policy=quick)
    assert [verdicts[m].state for m in range(4)] == [
        Idle.ACTIVE,
        Idle.IDLE,
        Idle.WARNED,
        Idle.SUSPENDED,
    ]
