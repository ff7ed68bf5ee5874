"""A heartbeat records its sessions' utilisation in a fixed number of queries, however many
sessions its node runs (``session_activity.record_usage_many``), with the same results as
recording each session's sample on its own (``record_usage``): samples trimmed to the window
and to ``MAX_SAMPLES``, and GPU-idle seconds under each session's own idle policy."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from scheduling.choices import SessionState
from scheduling.models import (
    DesktopProfile,
    IdlePolicy,
    Node,
    Session,
    SessionActivity,
    UsageRecord,
)
from scheduling.services.nodes import do_heartbeat
from scheduling.services.session_activity import (
    MAX_SAMPLES,
    record_usage,
    record_usage_many,
)

from ..conftest import gpu_inventory

pytestmark = [pytest.mark.django_db, pytest.mark.lifecycle]

T = datetime(2025, 3, 4, 9, 0, tzinfo=UTC)  # the first heartbeat's moment
STARTED = T - timedelta(minutes=1)  # every run started a minute before it


@dataclass(frozen=True)
class Kind:
    """One kind of running desktop, its seeded activity and the figures its agent sends."""

    profile: str  # "painting" (the conftest profile) or "training"
    purpose: str
    share: float | None  # the open run's GPUs; None: no open run
    gpu: float | None
    cpu: float | None
    seed: str = ""  # "recent": an old and a recent sample; "full": MAX_SAMPLES samples


# Policies: painting + hobby idles under 50 %, any coursework under 2 %, else the default 5 %.
KINDS = [
    Kind("painting", "hobby", 1.0, 30.0, 10.0, seed="recent"),  # idle (50 %), 8 s since
    Kind("training", "coursework", 0.5, 3.0, 20.0, seed="full"),  # busy (2 %)
    Kind("training", "hobby", 0.5, 3.0, None),  # idle (5 %), since the run's start: capped
    Kind("painting", "coursework", 1.0, 1.0, 5.0),  # idle (2 %: purpose beats none)
    Kind("painting", "hobby", 1.0, None, 7.0),  # no GPU figure: nothing
    Kind("training", "thesis", 0.0, 0.0, 1.0),  # CPU only: nothing
    Kind("painting", "hobby", None, 0.0, 0.0),  # no open run: nothing
]
# GPU-idle seconds after the first heartbeat, per GPU held (a sample speaks for 20 s at most).
EXPECTED_IDLE = [8.0, 0.0, 20.0, 20.0, 0.0, 0.0, None]


@pytest.fixture
def world(settings, profile, make_user):
    settings.AGENT_HEARTBEAT_INTERVAL_S = 10.0
    training = DesktopProfile.objects.create(
        slug="training",
        name="Model training",
        image=profile.image,
        cpus=1,
        memory_mb=1024,
        gpu_count=1,
        gpu_memory_min_mb=4000,
        allowed_kinds=["mig", "share"],
    )
    IdlePolicy.objects.create(profile=profile, purpose="hobby", gpu_idle_pct=50.0)
    IdlePolicy.objects.create(purpose="coursework", gpu_idle_pct=2.0)
    return {"painting": profile, "training": training, "user": make_user("ada")}


@pytest.fixture
def clock(monkeypatch):
    """Fix the portal's clock (the heartbeat's moment); returns a setter."""
    now = {"at": T}
    monkeypatch.setattr(timezone, "now", lambda: now["at"])

    def set_to(at: datetime) -> None:
        now["at"] = at

    return set_to


def node_named(register_node, hostname: str) -> Node:
    node, _ = register_node(hostname, [gpu_inventory(f"GPU-{hostname}", 0, mig_slices=1)])
    return node


def desktops(world, node: Node, count: int) -> list[Session]:
    """``count`` running desktops on ``node``, of the kinds in turn, seeded as they say."""
    made = []
    for index in range(count):
        kind = KINDS[index % len(KINDS)]
        profile = world[kind.profile]
        session = Session.objects.create(
            user=world["user"],
            profile=profile,
            purpose=kind.purpose,
            state=SessionState.RUNNING,
            node=node,
            placed_at=STARTED,
            started_at=STARTED,
        )
        if kind.share is not None:
            UsageRecord.objects.create(
                session=session,
                username="ada",
                purpose=kind.purpose,
                profile_slug=profile.slug,
                started_at=STARTED,
                gpu_share=kind.share,
            )
        if kind.seed == "recent":
            samples = [[(T - timedelta(hours=3)).isoformat(), 0, 0]]  # out of the window
            samples.append([(T - timedelta(seconds=8)).isoformat(), 0.0, 0.0])
            SessionActivity.objects.create(session=session, samples=samples)
        elif kind.seed == "full":
            samples = [
                [(T - timedelta(seconds=10 * (MAX_SAMPLES - step))).isoformat(), 50.0, 50.0]
                for step in range(MAX_SAMPLES)
            ]
            SessionActivity.objects.create(session=session, samples=samples)
        made.append(session)
    return made


def usage_of(sessions: list[Session]) -> list[dict]:
    return [
        {"session_id": s.pk, "gpu_pct": kind.gpu, "cpu_pct": kind.cpu}
        for index, s in enumerate(sessions)
        for kind in [KINDS[index % len(KINDS)]]
    ]


def heartbeat(node: Node, sessions: list[Session], stray: Session) -> int:
    """One heartbeat of ``node`` with figures for its sessions and for ``stray`` (another
    node's); the number of queries it made."""
    body = {
        "gpus": [],
        "running_sessions": [s.pk for s in sessions],
        "usage": [*usage_of(sessions), {"session_id": stray.pk, "gpu_pct": 0.0, "cpu_pct": 0.0}],
    }
    node = Node.objects.get(pk=node.pk)
    with CaptureQueriesContext(connection) as queries:
        do_heartbeat(node, body)
    return len(queries.captured_queries)


def samples(session: Session) -> list[list]:
    row = SessionActivity.objects.filter(session=session).first()
    return [] if row is None else row.samples


def idle(session: Session) -> float | None:
    run = UsageRecord.objects.filter(session=session).first()
    return None if run is None else run.gpu_idle_seconds


def test_a_heartbeat_makes_as_many_queries_for_30_sessions_as_for_3(
    world, register_node, clock
) -> None:
    other = node_named(register_node, "gpu-z01")
    stray = desktops(world, other, 1)[0]
    untouched = samples(stray)
    counts = {}
    for count in (3, 30):
        node = node_named(register_node, f"gpu-n{count:02d}")
        sessions = desktops(world, node, count)
        clock(T)
        first = heartbeat(node, sessions, stray)  # some rows made, some there
        clock(T + timedelta(seconds=10))
        second = heartbeat(node, sessions, stray)  # all rows there
        counts[count] = (first, second)
        assert all(len(samples(s)) >= 2 for s in sessions)
    assert counts[3] == counts[30], counts
    # The other node's session was spoken for by neither node: nothing recorded.
    assert samples(stray) == untouched and idle(stray) == 0.0


def test_a_heartbeat_records_what_one_at_a_time_recording_does(world, register_node, clock) -> None:
    node = node_named(register_node, "gpu-a01")
    other = node_named(register_node, "gpu-b01")
    batched = desktops(world, node, 2 * len(KINDS))
    single = desktops(world, other, 2 * len(KINDS))
    stray = single[0]
    untouched = samples(stray)

    clock(T)
    heartbeat(node, batched, stray)
    for index, session in enumerate(batched):
        kind = KINDS[index % len(KINDS)]
        share = kind.share or 0.0
        expected = EXPECTED_IDLE[index % len(KINDS)]
        assert idle(session) == (None if expected is None else pytest.approx(expected * share))
        kept = samples(session)
        assert kept[-1] == [T.isoformat(), kind.gpu, kind.cpu]
        if kind.seed == "recent":
            assert [s[0] for s in kept] == [(T - timedelta(seconds=8)).isoformat(), T.isoformat()]
        elif kind.seed == "full":
            assert len(kept) == MAX_SAMPLES
            assert kept[0][0] == (T - timedelta(seconds=10 * (MAX_SAMPLES - 1))).isoformat()
        else:
            assert len(kept) == 1
    assert samples(stray) == untouched and idle(stray) == 0.0

    # The same figures, one session at a time, at the same moments.
    for session, entry in zip(single, usage_of(single), strict=True):
        record_usage(session.pk, entry["gpu_pct"], entry["cpu_pct"], at=T)
    later = T + timedelta(seconds=7)
    clock(later)
    heartbeat(node, batched, stray)
    for session, entry in zip(single, usage_of(single), strict=True):
        record_usage(session.pk, entry["gpu_pct"], entry["cpu_pct"], at=later)

    for mine, twin in zip(batched, single, strict=True):
        assert samples(mine) == samples(twin)
        assert idle(mine) == (None if idle(twin) is None else pytest.approx(idle(twin)))
    # The second sample adds 7 s where the GPU stayed idle.
    assert idle(batched[0]) == pytest.approx(15.0)


def test_figures_for_sessions_that_do_not_exist_are_ignored(world, register_node) -> None:
    node = node_named(register_node, "gpu-a01")
    session = desktops(world, node, 1)[0]
    record_usage_many({session.pk: (0.0, 1.0), 999_999: (0.0, 1.0)}, T)
    assert samples(session)[-1] == [T.isoformat(), 0.0, 1.0]
    assert not SessionActivity.objects.filter(session_id=999_999).exists()
    record_usage_many({}, T)  # nothing to record: no queries, no error
