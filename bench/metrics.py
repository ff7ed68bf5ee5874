"""``python -m bench.metrics``: how long one ``/metrics`` scrape takes, 1000 sessions.

Fills a database of its own (``<name>_bench_metrics``, dropped at the end) with a pool of
``--nodes`` nodes of 4 GPUs of 7 MIG slices each, every GPU with telemetry, and
``--sessions`` sessions spread over every state (the running ones holding slices, most of
them started in the last hour), then renders the metrics ``--scrapes`` times as the view
does. Prints the queries one scrape makes and the median and worst scrape time. Uses the
database server of ``DATABASE_URL`` (PostgreSQL in production) and the Redis of
``REDIS_URL`` (for the cycle histogram). Run it from the repository root.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from datetime import timedelta

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
django.setup()

from django.contrib.auth import get_user_model  # noqa: E402
from django.db import connection  # noqa: E402
from django.test.utils import CaptureQueriesContext  # noqa: E402
from django.utils import timezone  # noqa: E402

from scheduling.choices import ON_NODE_STATES, Purpose, SessionState, SliceKind  # noqa: E402
from scheduling.models import (  # noqa: E402
    Allocation,
    DesktopProfile,
    Gpu,
    Node,
    Session,
    Slice,
)
from scheduling.services.metrics import render_metrics  # noqa: E402

GPUS_PER_NODE = 4
SLICES_PER_GPU = 7


def fill(nodes: int, sessions: int) -> None:
    """The pool and the sessions, written with bulk inserts."""
    now = timezone.now()
    made = Node.objects.bulk_create(
        Node(hostname=f"bench-{n:03d}", last_heartbeat=now - timedelta(seconds=n % 40))
        for n in range(nodes)
    )
    gpus = Gpu.objects.bulk_create(
        Gpu(
            node=node,
            uuid=f"GPU-{node.hostname}-{i}",
            index=i,
            model="NVIDIA A100-SXM4-80GB",
            memory_mb=81920,
            sharing=SliceKind.MIG,
            metrics={
                "uuid": f"GPU-{node.hostname}-{i}",
                "utilization_pct": 50.0,
                "memory_used_mb": 20000,
                "temperature_c": 60.0,
                "power_w": 200.0,
                "power_limit_w": 400.0,
                "fan_pct": None,
                "ecc_corrected_volatile": 0,
                "xid_errors": [],
            },
        )
        for node in made
        for i in range(GPUS_PER_NODE)
    )
    slices = Slice.objects.bulk_create(
        Slice(
            gpu=gpu,
            kind=SliceKind.MIG,
            profile="1g.10gb",
            device_uuid=f"MIG-{gpu.uuid}-{s}",
            memory_mb=9984,
            milli=142,
            slot=s,
        )
        for gpu in gpus
        for s in range(SLICES_PER_GPU)
    )
    profile = DesktopProfile.objects.create(
        slug="bench", name="bench", image="deskpool/tiny:latest", allowed_kinds=["mig"]
    )
    users = get_user_model().objects.bulk_create(
        get_user_model()(username=f"bench{u:03d}") for u in range(200)
    )
    states = list(SessionState)
    purposes = list(Purpose)
    rows = []
    for n in range(sessions):
        state = states[n % len(states)]
        created = now - timedelta(minutes=n % 120)
        rows.append(
            Session(
                user=users[n % len(users)],
                profile=profile,
                purpose=purposes[n % len(purposes)],
                state=state,
                created_at=created,
                started_at=created + timedelta(seconds=5 + n % 300)
                if state not in (SessionState.QUEUED, SessionState.CANCELLED)
                else None,
            )
        )
    made_sessions = Session.objects.bulk_create(rows)
    holders = [s for s in made_sessions if s.state in ON_NODE_STATES][: len(slices)]
    Allocation.objects.bulk_create(
        Allocation(session=s, node=slc.gpu.node, slice=slc)
        for s, slc in zip(holders, slices, strict=False)
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--nodes", type=int, default=10)
    parser.add_argument("--scrapes", type=int, default=20)
    args = parser.parse_args()
    original = connection.settings_dict["NAME"]
    connection.settings_dict["TEST"]["NAME"] = f"{original}_bench_metrics"
    connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    try:
        fill(args.nodes, args.sessions)
        render_metrics()  # warm the connection and the query plans
        with CaptureQueriesContext(connection) as queries:
            size = len(render_metrics())
        times = []
        for _ in range(args.scrapes):
            started = time.perf_counter()
            render_metrics()
            times.append(time.perf_counter() - started)
        print(
            f"bench_metrics: {args.sessions} sessions, {args.nodes} nodes, "
            f"{args.nodes * GPUS_PER_NODE} GPUs, {args.nodes * GPUS_PER_NODE * SLICES_PER_GPU} "
            f"slices on {connection.vendor}; one scrape: {len(queries)} queries, "
            f"{size} bytes; over {args.scrapes} scrapes: median "
            f"{statistics.median(times) * 1000:.1f} ms, worst {max(times) * 1000:.1f} ms"
        )
    finally:
        connection.creation.destroy_test_db(original, verbosity=0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
