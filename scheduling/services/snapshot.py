"""The pool as the engine sees it, read from the database: :func:`build_snapshot`.

Nodes with their CPU and memory headroom, start backlog (sessions placed there and not yet
running), racks and NVLink, the free slices (every slice without a live
:class:`~scheduling.models.Allocation`, whoever holds it), the sessions holding capacity, the
queue, the bookings within the hold horizon, the quotas with what is in use, the policy, and
the target workload of the fragmentation score. Each waiting request carries the nodes that
keep its person's home (``home_place.home_nodes``), each booking those that keep its class's
homes (``home_place.booking_home_nodes``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Count, Q, Sum
from django.utils import timezone

from .. import engine
from ..choices import ON_NODE_STATES, WAITING_STATES, SessionState
from ..models import (
    Alert,
    AlertRule,
    Allocation,
    Booking,
    DesktopProfile,
    Gpu,
    Node,
    PoolPolicy,
    Quota,
    Session,
    Slice,
    WarmDesktop,
)
from .billed import slice_units
from .gpu_cordon import cordoned_gpu_ids
from .home_place import booking_home_nodes, home_nodes
from .pool import admission_policy
from .quota_requests import extra_gpu_hours
from .usage import Usage, collect_usage, department_of

DEFAULT_GPU_POWER_W = 300.0  # a slice's rack-power estimate when the GPU reports no limit
# Placed on a node and not running yet: the node's start backlog (``NodeState.pending_starts``).
STARTS_PENDING = (SessionState.PLACED, SessionState.STARTING)


def held_slice_ids() -> set[int]:
    """Slices under a live hold, a session's or a warm desktop's."""
    return set(
        Allocation.objects.filter(released_at=None, slice__isnull=False).values_list(
            "slice_id", flat=True
        )
    )


def warm_counts() -> dict[int, int]:
    """Warm desktops per booking (every state: a failed one still holds its slice)."""
    return dict(
        WarmDesktop.objects.values_list("booking_id")
        .annotate(n=Count("pk"))
        .values_list("booking_id", "n")
    )


def warm_node_use() -> dict[int, tuple[float, int]]:
    """CPU and memory of the warm desktops per node (their profile's limits)."""
    use: dict[int, tuple[float, int]] = {}
    for warm in WarmDesktop.objects.select_related("booking__profile"):
        cpus, memory = use.get(warm.node_id, (0.0, 0))
        profile = warm.booking.profile
        use[warm.node_id] = (cpus + profile.cpus, memory + profile.memory_mb)
    return use


def engine_policy(policy: PoolPolicy) -> engine.Policy:
    return replace(
        admission_policy(),  # the "Pool usage" rule's levels: the one admission threshold
        # The GPU temperature alert rule's level, where there is one (docs/alerts.md).
        temperature_limit_c=AlertRule.temperature_limit_c(policy.temperature_limit_c),
        protected_runtime_s=int(policy.protected_minutes * 60),
        grace_s=int(policy.grace_minutes * 60),
        aging_s_per_gpu_hour=policy.aging_minutes_per_gpu_hour * 60,
        booking_hold_horizon_s=int(policy.booking_hold_hours * 3600),
    )


def _truthy(value: object) -> bool:
    return str(value).strip().lower() in {"1", "true", "yes", "high", "liquid"}


def _engine_slice(s: Slice, gpu: Gpu, node: Node) -> engine.FreeSlice:
    metrics = gpu.metrics or {}
    part = s.milli / 1000
    limit = metrics.get("power_limit_w") or DEFAULT_GPU_POWER_W
    return engine.FreeSlice(
        slice_id=s.pk,
        node_id=node.pk,
        gpu_id=gpu.pk,
        kind=s.kind,
        memory_mb=s.memory_mb,
        gpu_model=gpu.model,
        milli=s.milli,
        compute_units=slice_units(gpu.compute_units, s.milli),
        temperature_c=metrics.get("temperature_c"),
        power_w=float(limit) * part,
    )


def _pool(
    now: datetime,
) -> tuple[
    tuple[engine.NodeState, ...], tuple[engine.Rack, ...], dict[int, engine.FreeSlice], list[str]
]:
    """Nodes (engine form), racks, and every present slice with its GPU and node."""
    nodes = list(Node.objects.all())
    by_id = {n.pk: n for n in nodes}
    gpus = list(Gpu.objects.filter(present=True, node__in=nodes))
    uuid_to_gpu = {g.uuid: g.pk for g in gpus}
    links: dict[int, set[tuple[int, int]]] = defaultdict(set)
    rack_draw: dict[str, float] = defaultdict(float)
    for g in gpus:
        for peer in g.nvlink_peers or []:
            if peer in uuid_to_gpu:
                links[g.node_id].add((g.pk, uuid_to_gpu[peer]))
        rack = (by_id[g.node_id].labels or {}).get("rack", "")
        rack_draw[rack] += float((g.metrics or {}).get("power_w") or 0.0)
    used: defaultdict[int, tuple[float, int]] = defaultdict(lambda: (0.0, 0))
    pending: dict[int, int] = {}  # sessions placed but not running yet (the start backlog)
    for row in (
        Session.objects.on_node()
        .values("node_id")
        .annotate(
            cpus=Sum("profile__cpus"),
            memory=Sum("profile__memory_mb"),
            pending=Count("pk", filter=Q(state__in=STARTS_PENDING)),
        )
    ):
        used[row["node_id"]] = (row["cpus"] or 0.0, row["memory"] or 0)
        pending[row["node_id"]] = row["pending"]
    for node_id, (cpus, memory) in warm_node_use().items():
        used[node_id] = (used[node_id][0] + cpus, used[node_id][1] + memory)
    states = []
    budgets: dict[str, float] = {}
    for node in nodes:
        labels = node.labels or {}
        rack = str(labels.get("rack", ""))
        if labels.get("rack_power_budget_w"):
            budgets[rack] = max(budgets.get(rack, 0.0), float(labels["rack_power_budget_w"]))
        states.append(
            engine.NodeState(
                node_id=node.pk,
                hostname=node.hostname,
                # A draining node gets nothing new, as a cordoned one (services/drain.py).
                healthy=node.is_healthy(now) and node.takes_new_work,
                cpus_free=node.cpu_count - used[node.pk][0],
                memory_free_mb=node.memory_mb - used[node.pk][1],
                cpus_total=float(node.cpu_count),
                memory_total_mb=node.memory_mb,
                rack=rack,
                network_plane=str(labels.get("network_plane", "")),
                high_power=_truthy(labels.get("high_power", ""))
                or str(labels.get("cooling", "")).lower() == "liquid",
                nvlink=frozenset(links[node.pk]),
                pending_starts=pending.get(node.pk, 0),
            )
        )
    stopped = Alert.objects.stopped_racks()  # at their power warning: a hard stop
    racks = tuple(
        engine.Rack(r, b, rack_draw.get(r, 0.0), r in stopped) for r, b in sorted(budgets.items())
    )
    gpu_by_id = {g.pk: g for g in gpus}
    slices = {
        s.pk: _engine_slice(s, gpu_by_id[s.gpu_id], by_id[gpu_by_id[s.gpu_id].node_id])
        for s in Slice.objects.filter(present=True, gpu__in=gpus)
    }
    return tuple(states), racks, slices, sorted({g.model for g in gpus})


def _models_for(profile: DesktopProfile, pool_models: list[str]) -> tuple[str, ...]:
    """The pool's model names matching the profile's model substrings (empty = any)."""
    wanted = [m.lower() for m in profile.gpu_models or []]
    if not wanted:
        return ()
    matched = tuple(m for m in pool_models if any(w in m.lower() for w in wanted))
    return matched or tuple(profile.gpu_models)


def profile_request(
    profile: DesktopProfile, pool_models: list[str] | None = None, **fields: Any
) -> engine.QueuedRequest:
    """A request of the profile's shape; ``fields`` give who asks and when."""
    defaults = {"session_id": 0, "tier": 2, "submitted_at": timezone.now()}
    return engine.QueuedRequest(
        **{**defaults, **fields},
        gpu_count=profile.gpu_count,
        gpu_memory_min_mb=profile.gpu_memory_min_mb,
        allowed_kinds=tuple(profile.allowed_kinds),
        cpus=profile.cpus,
        memory_mb=profile.memory_mb,
        duration_s=profile.max_duration_minutes * 60,
        gpu_models=_models_for(profile, pool_models or []),
        compute_min=profile.compute_min,
    )


def _request(
    s: Session, usage: Usage, pool_models: list[str], home: tuple[int, ...]
) -> engine.QueuedRequest:
    return profile_request(
        s.profile,
        pool_models,
        session_id=s.pk,
        tier=s.tier,
        submitted_at=s.created_at,
        user=s.user.get_username(),
        course=s.course_code,
        department=department_of(s),
        booking_id=s.booking_id,
        usage_gpu_hours=usage.decayed_by_user.get(s.user.get_username(), 0.0),
        boosted_at=s.boosted_at,
        home_nodes=home,
    )


def _quotas(
    usage: Usage, queue: tuple[engine.QueuedRequest, ...], extra: dict[str, float]
) -> tuple[engine.Quota, ...]:
    """Quota rows with what is in use; a ``*`` default becomes one quota per member it covers."""
    rows = {(q.scope, q.key): q for q in Quota.objects.all()}
    keys: set[tuple[str, str]] = set()
    for r in queue:
        keys |= {("user", r.user), ("course", r.course), ("department", r.department)}
    out = []
    for (scope, key), q in rows.items():
        covered = [key] if key != "*" else sorted(
            k for sc, k in keys if sc == scope and k and (scope, k) not in rows
        )  # fmt: skip
        for member in covered:
            out.append(engine_quota(q, scope, member, usage, extra))
    return tuple(out)


def quota_rows(members: Iterable[tuple[str, str]]) -> dict[tuple[str, str], Quota]:
    """The quota rows that cover these (scope, key) members (a user, a course, a
    department), in one query: each member's own row, else its scope's ``*``; members
    without either are left out."""
    wanted = [(scope, key) for scope, key in members if key]
    if not wanted:
        return {}
    scopes = {scope for scope, _ in wanted}
    keys = {key for _, key in wanted} | {"*"}
    found = {
        (row.scope, row.key): row
        for row in Quota.objects.filter(scope__in=scopes, key__in=keys).order_by("pk")
    }
    covered = {}
    for scope, key in wanted:
        row = found.get((scope, key)) or found.get((scope, "*"))
        if row is not None:
            covered[(scope, key)] = row
    return covered


def quota_row(scope: str, key: str) -> Quota | None:
    """The quota row that covers one user, course or department: its own, else ``*``."""
    return quota_rows([(scope, key)]).get((scope, key))


def engine_quota(
    row: Quota, scope: str, key: str, usage: Usage, extra: dict[str, float]
) -> engine.Quota:
    """One member's quota with what is in use. The one place limits are built (submit check,
    snapshot, quota page): a user's granted extra GPU-hours (``extra``, per username, from
    ``quota_requests.extra_gpu_hours``) raise their weekly limit."""
    limit = row.max_gpu_hours_week
    if limit is not None and scope == "user":
        limit += extra.get(key, 0.0)
    return engine.Quota(
        scope=scope,
        key=key,
        max_sessions=row.max_sessions,
        max_gpu_hours_week=limit,
        max_slice_memory_mb=row.max_slice_memory_mb,
        sessions=usage.holding.get((scope, key), 0),
        gpu_hours_week=usage.week.get((scope, key), 0.0),
    )


def pool_snapshot(now: datetime) -> tuple[engine.Snapshot, list[str]]:
    """The pool alone (nodes and every present slice, busy or not; no queue): what could
    ever run there. With the pool's GPU model names, for ``profile_request``."""
    nodes, racks, slices, pool_models = _pool(now)
    snapshot = engine.Snapshot(
        nodes=nodes,
        free_slices=tuple(slices.values()),
        queue=(),
        racks=racks,
        policy=engine_policy(PoolPolicy.current()),
    )
    return snapshot, pool_models


def build_snapshot(now: datetime | None = None) -> engine.Snapshot:
    """The pool as the engine sees it: nodes, slices, sessions, queue, bookings, quotas."""
    now = now or timezone.now()
    policy = PoolPolicy.current()
    nodes, racks, slices, pool_models = _pool(now)
    usage = collect_usage(now, policy.usage_half_life_days, ON_NODE_STATES)
    running = []
    # Every live hold (a session's or a warm desktop's) is out of the free pool; a warm
    # desktop's booking holds one seat fewer.
    held = held_slice_ids()
    cordoned_gpus = cordoned_gpu_ids()  # sick: their slices take no new work
    warm_seats = warm_counts()
    for s in (
        Session.objects.on_node()
        .select_related("profile", "user", "user__member", "course")
        .prefetch_related("allocations")
    ):
        mine = [a.slice_id for a in s.allocations.all() if a.released_at is None and a.slice_id]
        started = s.started_at or s.placed_at or s.created_at
        limit = timedelta(minutes=s.profile.max_duration_minutes + s.extended_minutes)
        ends = s.preempt_deadline or started + limit
        running.append(
            engine.RunningSession(
                session_id=s.pk,
                tier=s.tier,
                node_id=s.node_id or 0,
                slices=tuple(slices[sid] for sid in mine if sid in slices),
                cpus=s.profile.cpus,
                memory_mb=s.profile.memory_mb,
                started_at=started,
                ends_at=ends,
                user=s.user.get_username(),
                course=s.course_code,
                department=department_of(s),
                booking_id=s.booking_id,
                preempted_for=s.preempted_for_id,
            )
        )
    waiting = list(
        Session.objects.filter(state__in=WAITING_STATES).select_related(
            "profile", "user", "user__member", "course"
        )
    )
    homes = home_nodes(waiting)  # where each person's home is kept, when not shared
    queue = tuple(_request(s, usage, pool_models, homes.get(s.pk, ())) for s in waiting)
    horizon = now + timedelta(hours=policy.booking_hold_hours)
    held_for = list(
        Booking.objects.filter(
            cancelled_at=None, ends_at__gt=now, starts_at__lte=horizon
        ).select_related("course", "profile")
    )
    class_homes = booking_home_nodes(held_for)  # where the class's homes are kept
    bookings = tuple(
        engine.Booking(
            booking_id=b.pk,
            course=b.course.code,
            seats=max(0, b.seats - warm_seats.get(b.pk, 0)),
            starts_at=b.starts_at,
            ends_at=b.ends_at,
            shape=profile_request(
                b.profile,
                pool_models,
                submitted_at=b.starts_at,
                course=b.course.code,
                booking_id=b.pk,
            ),
            home_nodes=class_homes.get(b.pk, ()),
        )
        for b in held_for
    )
    return engine.Snapshot(
        nodes=nodes,
        free_slices=tuple(
            v for k, v in slices.items() if k not in held and v.gpu_id not in cordoned_gpus
        ),
        queue=queue,
        running=tuple(running),
        bookings=bookings,
        quotas=_quotas(usage, queue, extra_gpu_hours(now)),
        racks=racks,
        policy=engine_policy(policy),
        workload=_workload(slices.values()),
    )


def _workload(pool: Iterable[engine.FreeSlice]) -> tuple[engine.TargetShape, ...]:
    """The fragmentation score's target mix: active profiles, weighted by recent requests.

    A profile's GPU part is the smallest slice in the pool that fits it. Weights are the
    profile's sessions over the last 7 days plus one, so a quiet catalogue still counts.
    """
    since = timezone.now() - timedelta(days=7)
    recent = dict(
        Session.objects.filter(created_at__gte=since)
        .values_list("profile_id")
        .annotate(n=Count("pk"))
        .values_list("profile_id", "n")
    )
    slices = list(pool)
    shapes = []
    for profile in DesktopProfile.objects.filter(active=True).order_by("pk"):
        fitting = [
            s.milli
            for s in slices
            if s.kind in profile.allowed_kinds and s.memory_mb >= profile.gpu_memory_min_mb
        ]
        milli = min(fitting, default=1000) if profile.gpu_count else 0
        shapes.append(
            engine.TargetShape(
                int(profile.cpus * 1000),
                milli,
                profile.gpu_count,
                None,
                float(recent.get(profile.pk, 0) + 1),
            )
        )
    total = sum(s.weight for s in shapes) or 1.0
    return tuple(
        engine.TargetShape(s.cpu_milli, s.gpu_milli, s.num_gpu, None, s.weight / total)
        for s in shapes
    )
