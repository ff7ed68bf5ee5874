"""The campus-day simulator (scheduling.sim.campus): invariants over a short day, and metrics."""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import replace
from datetime import datetime

import pytest

from scheduling.engine import Quota
from scheduling.engine.mig import table_for, validate_layout
from scheduling.sim import campus as C
from scheduling.sim.__main__ import main as sim_main


@pytest.fixture(scope="module")
def short_day():
    # 13:00-17:00: the labs, the class-time peak and the research group's growth.
    cfg = C.Config(seed=7, start_h=13.0, end_h=17.0, research_curve=((13, 20), (15, 35)))
    day = C.CampusDay(cfg)
    return day, day.run()


def test_pool_layout():
    pool = C.build_pool()
    assert pool.gpus == 35
    table = table_for(C.A100)
    for spec in C.DEFAULT_LAYOUT:
        if spec.layout.mode == "mig":
            assert validate_layout(table, C.mig_instances(spec.gpu_model, spec.layout.profiles))
    milli = {(s.kind, s.memory_mb): s.milli for s in pool.slices}
    assert milli[("mig", 9984)] == 1000 * 1 // 7
    assert milli[("mig", 19968)] == 1000 * 2 // 7
    assert milli[("mig", 40192)] == 1000 * 3 // 7
    assert milli[("share", 3840)] == 250
    assert milli[("whole", 81920)] == 1000
    per_gpu = defaultdict(int)
    for s in pool.slices:
        per_gpu[s.gpu_id] += s.milli
    assert all(v <= 1000 for v in per_gpu.values())
    assert pool.capacity_milli == sum(per_gpu.values())


def test_short_day_runs_and_no_slice_is_double_held(short_day):
    day, res = short_day
    m = C.metrics(res)
    assert 0 < m["utilisation_milli"] <= 1000
    assert res.cycles > (4 * 3600) // 30
    intervals = defaultdict(list)
    for slice_id, _, start, end in res.holds:
        assert day.start_s <= start <= end <= day.end_s
        intervals[slice_id].append((start, end))
    for spans in intervals.values():
        spans.sort()
        for (_, end), (start, _) in zip(spans, spans[1:], strict=False):
            assert start >= end, "a slice was held by two sessions at once"
    # The integral of held milli equals the sum over holds.
    milli = {s.slice_id: s.milli for s in res.pool.slices}
    held = sum(milli[sid] * (end - start) for sid, _, start, end in res.holds)
    assert held == pytest.approx(res.held_milli_s)


def test_preempted_sessions_are_requeued_with_their_age_and_thesis_is_never_preempted(short_day):
    day, res = short_day
    assert res.preemptions, "the short day should exercise preemption"
    for p in res.preemptions:
        assert p["victim_tier"] not in (0, 1), "thesis or booked preempted"
        victim = day.jobs[p["victim"]]
        if victim.booking_id is not None:
            spec = next(b for b in day.cfg.bookings if b.booking_id == victim.booking_id)
            assert not spec.start_h * 3600 <= p["t"] < spec.end_h * 3600
        assert p["t"] - p["victim_started_s"] >= day.cfg.policy.protected_runtime_s
        assert p["deadline_s"] - p["t"] == day.cfg.policy.grace_s
    requeues = {(r["session_id"], r["t"]): r for r in res.requeues}
    checked = 0
    for p in res.preemptions:
        if p["deadline_s"] >= min(day.end_s, p["victim_end_s"]):
            continue  # the day, or the session itself, ended within its grace
        r = requeues[(p["victim"], p["deadline_s"])]
        first = next(e for e in res.episodes if e.session_id == p["victim"] and not e.requeued)
        assert datetime.fromisoformat(r["submitted_at"]) == C.CampusDay.at(first.enqueued_s)
        checked += 1
    assert checked >= 1
    assert len(res.requeues) == checked


def test_deterministic_per_seed():
    cfg = C.Config(seed=3, start_h=9.0, end_h=11.0)
    a = C.metrics(C.simulate(cfg))
    b = C.metrics(C.simulate(C.Config(seed=3, start_h=9.0, end_h=11.0)))
    for m in (a, b):
        m.pop("wall_s"), m.pop("plan_s")
    assert a == b


def _tiny(jobs):
    layout = (C.NodeSpec("n1", C.A100, 2, 81920, C.WHOLE, 64, 262144, True, True),)
    cfg = C.Config(
        start_h=10.0,
        end_h=11.0,
        painting=0,
        blender=0,
        medical=0,
        bookings=(),
        research_curve=((0, 0),),
        layout=layout,
    )
    day = C.CampusDay(cfg)
    for job in jobs:
        day._add_job(job)
    return day, day.run()


def _job(sid, user, tier, submit_h, minutes, gpus=1):
    p = C.TRAIN_1 if gpus == 1 else C.TRAIN_2
    s = int(submit_h * 3600)
    return C.Job(sid, user, "research", tier, p, s, minutes * 60, minutes * 60, 3600 * 5)


def test_metrics_on_a_tiny_scenario():
    # 2 whole GPUs, 10:00-11:00. a: 1 GPU 10:00-10:30. b: 2 GPUs at 10:10, waits until a
    # ends (10:30), then runs 30 min (to 11:00). c: 1 GPU at 10:40, waits to the day's end.
    day, res = _tiny(
        [
            _job(1, "a", 1, 10.0, 30),
            _job(2, "b", 1, 10 + 10 / 60, 30, 2),
            _job(3, "c", 2, 10 + 40 / 60, 10),
        ]
    )
    m = C.metrics(res)
    # held: a 1000 x 30 min + b 2000 x 30 min = 90,000 milli-min of 2000 x 60.
    assert m["utilisation_milli"] == 750
    thesis = m["tiers"]["thesis"]
    assert thesis["started"] == 2
    assert thesis["wait_p50_s"] == 0 and thesis["wait_p95_s"] == 20 * 60
    course = m["tiers"]["coursework"]
    assert course["started"] == 0 and course["still_waiting"] == 1
    # Demand within the day: a 1000 x 30, b 2000 x 30 (from 10:10 it would end 10:40),
    # c 1000 x 10; received: a all, b all (30 of 30 min), c none -> x = (1, 1, 0).
    assert m["jain"] == pytest.approx(4 / 6)
    assert m["preemptions"] == 0


def test_percentile_and_jain():
    assert C.percentile([], 50) is None
    assert C.percentile([5, 1, 3], 50) == 3
    assert C.percentile(list(range(1, 101)), 95) == 95
    assert C.jain([1, 1, 1]) == pytest.approx(1.0)
    assert C.jain([1, 0, 0, 0]) == pytest.approx(0.25)


def test_the_snapshot_carries_what_the_portal_puts_in_its_own():
    cfg = C.Config(
        start_h=10.0,
        end_h=11.0,
        quotas=(Quota("user", "*", max_sessions=1), Quota("course", "ART-101", max_sessions=9)),
        rack_budgets_w=(("r1", 5000.0),),
    )
    day = C.CampusDay(cfg)
    for job in [_job(1, "a", 1, 10.0, 30), _job(2, "a", 1, 10.0, 30)]:
        day._add_job(job)
        day.enqueue(job, day.at(day.t), job.duration_s, job.expected_s, episode=0)
    day.cycle()
    snap = day.snapshot()
    # The catalogue, weighted by requests so far plus one: two TRAIN_1 requests of 10 profiles.
    weights = {(s.cpu_milli, s.gpu_milli, s.num_gpu): s.weight for s in snap.workload}
    assert len(snap.workload) == len(C.CATALOGUE)
    assert weights[(8000, 1000, 1)] == pytest.approx(3 / 12)
    assert weights[(2000, 250, 1)] == pytest.approx(1 / 12)  # AI painting: a T4 share fits
    assert sum(s.weight for s in snap.workload) == pytest.approx(1.0)
    # Racks with a budget, drawing what their busy slices draw (a whole A100: 400 W).
    assert [(r.name, r.budget_w) for r in snap.racks] == [("r1", 5000.0)]
    busy = [s for r in snap.running for s in r.slices]
    assert busy and snap.racks[0].draw_w == sum(s.power_w for s in busy if s.node_id in (1, 2))
    assert {s.power_w for s in busy} == {400.0}
    # The user's "*" row expanded for the member waiting, with the session holding capacity.
    (quota,) = [q for q in snap.quotas if q.scope == "user"]
    assert (quota.key, quota.max_sessions, quota.sessions) == ("a", 1, 1)
    assert [q.key for q in snap.quotas if q.scope == "course"] == ["ART-101"]


def test_a_quota_of_the_config_holds_through_the_day():
    quotas = (Quota("user", "*", max_sessions=1),)
    layout = (C.NodeSpec("n1", C.A100, 2, 81920, C.WHOLE, 64, 262144, True, True),)
    cfg = C.Config(
        start_h=10.0, end_h=11.0, painting=0, blender=0, medical=0, bookings=(),
        research_curve=((0, 0),), layout=layout, quotas=quotas,
    )  # fmt: skip
    day = C.CampusDay(cfg)
    for job in [_job(1, "a", 1, 10.0, 20), _job(2, "a", 1, 10.0, 20)]:
        day._add_job(job)
    res = day.run()
    starts = sorted(e.started_s for e in res.episodes if e.started_s is not None)
    assert starts == [10 * 3600, 10 * 3600 + 20 * 60]  # one at a time, though 2 GPUs are free
    # A GPU-hour quota used up refuses at submit, as the portal does.
    spent = replace(cfg, quotas=(Quota("user", "b", max_gpu_hours_week=0.0),))
    day = C.CampusDay(spent)
    day._add_job(_job(3, "b", 1, 10.0, 20))
    res = day.run()
    assert res.quota_refused == 1 and res.episodes == []


def test_the_command_runs(tmp_path, capsys):
    out = tmp_path / "day.json"
    assert (
        sim_main(["campus", "--seed", "5", "--start", "10", "--end", "10.5", "--json", str(out)])
        == 0
    )
    assert "campus day 10:00-10:30 UTC, seed 5" in capsys.readouterr().out
    assert json.loads(out.read_text())["seed"] == 5
