"""CLI: ``python -m scheduling.sim openb --pods P --nodes N --policy random,bestfit,fgd``."""

from __future__ import annotations

import argparse
import sys

from . import campus
from .policies import POLICIES
from .runner import format_table, run_openb


def parse_seeds(text: str) -> list[int]:
    seeds: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if "-" in part[1:]:
            lo, hi = part.split("-", 1)
            seeds.extend(range(int(lo), int(hi) + 1))
        elif part:
            seeds.append(int(part))
    return seeds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scheduling.sim")
    sub = parser.add_subparsers(dest="command", required=True)
    op = sub.add_parser("openb", help="FGD-paper protocol on the Alibaba openb trace")
    op.add_argument("--pods", required=True, help="openb_pod_list_*.csv")
    op.add_argument("--nodes", required=True, help="openb_node_list_*.csv")
    op.add_argument(
        "--policy", default=",".join(POLICIES), help="comma list: " + ",".join(POLICIES)
    )
    op.add_argument("--seeds", default="42-51", help="e.g. 42-51 or 1,2,3")
    op.add_argument("--out", default=None, help="directory for summary.json and per-run CSVs")
    op.add_argument("--jobs", type=int, default=None, help="worker processes (default: CPUs)")
    op.add_argument("--ratio", type=float, default=1.3, help="arrived GPU request / capacity")
    op.add_argument("--popularity", type=float, default=0.95, help="FGD target-workload cut")
    campus.add_parser(sub)
    args = parser.parse_args(argv)
    if args.command == "campus":
        return campus.main(args)

    policies = [p.strip() for p in args.policy.split(",") if p.strip()]
    for p in policies:
        if p not in POLICIES:
            parser.error(f"unknown policy {p!r}")
    summary = run_openb(
        args.pods,
        args.nodes,
        policies,
        parse_seeds(args.seeds),
        args.out,
        jobs=args.jobs,
        ratio=args.ratio,
        popularity=args.popularity,
    )
    print(
        f"{summary['pods_file']} on {summary['nodes_file']}: {summary['nodes']} nodes, "
        f"{summary['gpus']} GPUs, seeds {args.seeds}, {summary['jobs']} jobs, "
        f"{summary['wall_seconds']:.1f} s wall"
    )
    print(format_table(summary["policies"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
