"""The campus day's metrics and its printed table (see ``docs/campus.md``, "Metrics")."""

from __future__ import annotations

import math
from collections.abc import Sequence

from scheduling.engine import Code, Reason

from .state import TIERS, DayResult


def note_text(note: Reason) -> str:
    """A plan's note as the report words it."""
    p = note.params
    if note.code == Code.BOOKING_SHORT:
        return (
            f"booking {p['booking']} ({p['course']}): {p['held']} of {p['need']} seats held; "
            f"{p['need'] - p['held']} do not fit the pool now"
        )
    return f"{note.code}: {dict(p)}"


def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100) of the values, None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def jain(values: list[float]) -> float | None:
    """Jain's fairness index (sum x)^2 / (n sum x^2): 1 when all equal, 1/n when one gets all."""
    if not values:
        return None
    sq = sum(x * x for x in values)
    return (sum(values) ** 2) / (len(values) * sq) if sq else 1.0


def metrics(res: DayResult) -> dict:
    capacity = res.pool.capacity_milli
    util = res.held_milli_s / (capacity * res.span_s) if res.span_s else 0.0
    tiers = {}
    for name in TIERS:
        eps = [e for e in res.episodes if e.tier == name]
        waits = [e.started_s - e.enqueued_s for e in eps if e.started_s is not None]
        tiers[name] = {
            "requests": len({e.session_id for e in eps}),
            "queue_entries": len(eps),
            "started": len(waits),
            "wait_p50_s": percentile(waits, 50),
            "wait_p95_s": percentile(waits, 95),
            "abandoned": sum(1 for e in eps if e.abandoned),
            "still_waiting": sum(1 for e in eps if e.started_s is None and not e.abandoned),
        }
    ratios = [
        min(1.0, res.received.get(u, 0.0) / d) for u, d in sorted(res.demand.items()) if d > 0
    ]
    eta_err = [
        abs(e.started_s - e.eta_s) for e in res.episodes if e.eta_s is not None and e.started_s
    ]
    return {
        "seed": res.config.seed,
        "window": f"{hm(res.config.start_h)}-{hm(res.config.end_h)}",
        "cycle_s": res.config.cycle_s,
        "booking_hold_horizon_s": res.config.policy.booking_hold_horizon_s,
        "research_elastic": res.config.research_elastic,
        "gpus": res.pool.gpus,
        "capacity_milli": capacity,
        "utilisation_milli": round(util * 1000),
        "tiers": tiers,
        "preemptions": len(res.preemptions),
        "jain": jain(ratios),
        "users": len(ratios),
        "refused_attempts": res.refused,
        "refused_requests": res.refused_requests,
        "quota_refused": res.quota_refused,
        "abandoned": sum(1 for e in res.episodes if e.abandoned),
        "eta_error_p50_s": percentile(eta_err, 50),
        "research_jobs": res.research_jobs,
        "peak_research_milli": res.peak_research_milli,
        "cycles": res.cycles,
        "plan_s": round(res.plan_s, 2),
        "wall_s": round(res.wall_s, 2),
        "notes": sorted(res.notes)[:5],
        "timeline": res.timeline,
    }


def hm(h: float) -> str:
    return f"{int(h):02d}:{int(round((h - int(h)) * 60)):02d}"


def _fmt_s(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:.0f} s" if v < 120 else f"{v / 60:.1f} min"


def format_table(m: dict) -> str:
    lines = [
        f"campus day {m['window']} UTC, seed {m['seed']}, cycle {m['cycle_s']} s: "
        f"{m['gpus']} GPUs, capacity {m['capacity_milli']} milli; booking hold horizon "
        f"{m['booking_hold_horizon_s']} s, research "
        f"{'elastic' if m['research_elastic'] else 'eager'}",
        f"utilisation (time-averaged, held / capacity)  {m['utilisation_milli']} milli",
        "",
        f"{'tier':<13} {'requests':>8} {'started':>8} {'wait p50':>9} {'wait p95':>9} "
        f"{'abandoned':>9} {'waiting':>8}",
    ]
    for name, t in m["tiers"].items():
        lines.append(
            f"{name:<13} {t['requests']:>8} {t['started']:>8} {_fmt_s(t['wait_p50_s']):>9} "
            f"{_fmt_s(t['wait_p95_s']):>9} {t['abandoned']:>9} {t['still_waiting']:>8}"
        )
    jain_text = "-" if m["jain"] is None else f"{m['jain']:.3f}"
    lines += [
        "",
        f"preemptions {m['preemptions']}   Jain's fairness {jain_text} over {m['users']} users   "
        f"refused {m['refused_requests']} requests ({m['refused_attempts']} attempts)   "
        f"abandoned {m['abandoned']}",
        f"research jobs {m['research_jobs']}, peak research hold {m['peak_research_milli']} milli; "
        f"{m['cycles']} plan() calls, {m['plan_s']} s in plan(), {m['wall_s']} s wall",
    ]
    if m["quota_refused"]:
        lines.append(f"refused by a quota at submit: {m['quota_refused']}")
    return "\n".join(lines)
