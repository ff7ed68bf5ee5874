"""``python -m scheduling.sim campus``: one campus day, printed (and optionally as JSON)."""

from __future__ import annotations

import json
from dataclasses import replace

from scheduling.engine import Policy

from .day import simulate
from .report import format_table, metrics
from .workload import Config


def main(args) -> int:
    policy = Policy()
    if args.hold_horizon is not None:
        policy = replace(policy, booking_hold_horizon_s=args.hold_horizon)
    cfg = Config(
        seed=args.seed,
        cycle_s=args.cycle,
        start_h=args.start,
        end_h=args.end,
        policy=policy,
        research_elastic=not args.research_eager,
    )
    res = simulate(cfg)
    m = metrics(res)
    print(format_table(m))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(m, f, indent=2)
    return 0


def add_parser(sub) -> None:
    cp = sub.add_parser("campus", help="one campus day on the demo pool, through the engine")
    cp.add_argument("--seed", type=int, default=42)
    cp.add_argument("--cycle", type=int, default=30, help="seconds between scheduling cycles")
    cp.add_argument("--start", type=float, default=8.0, help="hour the day starts")
    cp.add_argument("--end", type=float, default=22.0, help="hour the day ends")
    cp.add_argument("--json", default=None, help="write the metrics as JSON here")
    cp.add_argument(
        "--hold-horizon",
        type=int,
        default=None,
        help="Policy.booking_hold_horizon_s (default: the engine's Policy default)",
    )
    cp.add_argument(
        "--research-eager",
        action="store_true",
        help="the research group submits up to its curve without looking at the pool",
    )
