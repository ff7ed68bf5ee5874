"""One scheduling cycle: read a snapshot, ask the engine for a plan, apply it."""

from __future__ import annotations

import logging
import secrets
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import timedelta

from django.db import IntegrityError, transaction
from django.db.models import Count, Sum
from django.utils import timezone

from .. import engine
from ..choices import ON_NODE_STATES, WAITING_STATES, AuditKind, SessionState
from ..models import (
    Allocation,
    AuditEvent,
    Booking,
    DesktopProfile,
    Gpu,
    Node,
    PoolPolicy,
    Quota,
    Session,
    Slice,
)
from . import Conflict, warm
from .lifecycle import do_transition
from .usage import Usage, collect_usage, department_of

log = logging.getLogger(__name__)

DEFAULT_GPU_POWER_W = 300.0  # a slice's rack-power estimate when the GPU reports no limit
VNC_PASSWORD_ALPHABET = "abcdefghijkmnopqrstuvwxyzACDEFGHJKLMNPQRSTUVWXYZ23456789"


@dataclass(frozen=True)
class CycleResult:
    placed: int
    waiting: int
    conflicts: int


def engine_policy(policy: PoolPolicy) -> engine.Policy:
    return engine.Policy(
        warn_utilisation=policy.warn_percent / 100,
        block_utilisation=policy.block_percent / 100,
        temperature_limit_c=policy.temperature_limit_c,
        protected_runtime_s=int(policy.protected_minutes * 60),
        grace_s=int(policy.grace_minutes * 60),
        aging_s_per_gpu_hour=policy.aging_minutes_per_gpu_hour * 60,
        booking_hold_horizon_s=int(policy.booking_hold_hours * 3600),
    )


def _truthy(value) -> bool:
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
        compute_units=round(gpu.compute_units * part, 4),
        temperature_c=metrics.get("temperature_c"),
        power_w=float(limit) * part,
    )


def _pool(now):
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
    used = defaultdict(lambda: (0.0, 0))
    for row in (
        Session.objects.on_node()
        .values("node_id")
        .annotate(cpus=Sum("profile__cpus"), memory=Sum("profile__memory_mb"))
    ):
        used[row["node_id"]] = (row["cpus"] or 0.0, row["memory"] or 0)
    for node_id, (cpus, memory) in warm.warm_node_use().items():
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
                healthy=node.is_healthy(now),
                cpus_free=node.cpu_count - used[node.pk][0],
                memory_free_mb=node.memory_mb - used[node.pk][1],
                rack=rack,
                network_plane=str(labels.get("network_plane", "")),
                high_power=_truthy(labels.get("high_power", ""))
                or str(labels.get("cooling", "")).lower() == "liquid",
                nvlink=frozenset(links[node.pk]),
            )
        )
    racks = tuple(engine.Rack(r, b, rack_draw.get(r, 0.0)) for r, b in sorted(budgets.items()))
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
    profile: DesktopProfile, pool_models: list[str] | None = None, **fields
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


def _request(s: Session, usage: Usage, pool_models: list[str]) -> engine.QueuedRequest:
    return profile_request(
        s.profile,
        pool_models,
        session_id=s.pk,
        tier=s.tier,
        submitted_at=s.created_at,
        user=s.user.get_username(),
        course=s.course.code if s.course_id else "",
        department=department_of(s),
        booking_id=s.booking_id,
        usage_gpu_hours=usage.decayed_by_user.get(s.user.get_username(), 0.0),
    )


def _quotas(usage: Usage, queue: tuple[engine.QueuedRequest, ...]) -> tuple[engine.Quota, ...]:
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
            out.append(
                engine.Quota(
                    scope=scope,
                    key=member,
                    max_sessions=q.max_sessions,
                    max_gpu_hours_week=q.max_gpu_hours_week,
                    max_slice_memory_mb=q.max_slice_memory_mb,
                    sessions=usage.holding.get((scope, member), 0),
                    gpu_hours_week=usage.week.get((scope, member), 0.0),
                )
            )
    return tuple(out)


def build_snapshot(now=None) -> engine.Snapshot:
    """The pool as the engine sees it: nodes, slices, sessions, queue, bookings, quotas."""
    now = now or timezone.now()
    policy = PoolPolicy.current()
    nodes, racks, slices, pool_models = _pool(now)
    usage = collect_usage(now, policy.usage_half_life_days, ON_NODE_STATES)
    running = []
    # A warm desktop's slice is its booking's: out of the free pool, and one seat fewer to hold.
    held: set[int] = warm.warm_slice_ids()
    warm_seats = warm.warm_counts()
    for s in (
        Session.objects.on_node()
        .select_related("profile", "user", "user__member", "course")
        .prefetch_related("allocations")
    ):
        mine = [a.slice_id for a in s.allocations.all() if a.released_at is None and a.slice_id]
        held |= set(mine)
        started = s.started_at or s.placed_at or s.created_at
        ends = s.preempt_deadline or started + timedelta(minutes=s.profile.max_duration_minutes)
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
                course=s.course.code if s.course_id else "",
                department=department_of(s),
                booking_id=s.booking_id,
                preempted_for=s.preempted_for_id,
            )
        )
    queue = tuple(
        _request(s, usage, pool_models)
        for s in Session.objects.filter(state__in=WAITING_STATES).select_related(
            "profile", "user", "user__member", "course"
        )
    )
    horizon = now + timedelta(hours=policy.booking_hold_hours)
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
        )
        for b in Booking.objects.filter(
            cancelled_at=None, ends_at__gt=now, starts_at__lte=horizon
        ).select_related("course", "profile")
    )
    return engine.Snapshot(
        nodes=nodes,
        free_slices=tuple(v for k, v in slices.items() if k not in held),
        queue=queue,
        running=tuple(running),
        bookings=bookings,
        quotas=_quotas(usage, queue),
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


def new_vnc_password() -> str:
    return "".join(secrets.choice(VNC_PASSWORD_ALPHABET) for _ in range(8))


def place_session(
    session_id: int,
    parts: Sequence[tuple[int, Sequence[int]]],
    *,
    units: float,
    reason: str,
    warm_key: str = "",
    audit: dict | None = None,
) -> None:
    """A waiting session becomes PLACED on ``parts`` (``(node, slice ids)``, the first node
    its own): new VNC password, live allocations and the audit record. Call it inside a
    transaction; Conflict or IntegrityError when something raced it."""
    node_id = parts[0][0]
    do_transition(
        session_id,
        SessionState.PLACED,
        actor="scheduler",
        only_from=frozenset(WAITING_STATES),
        node_id=node_id,
        placed_at=timezone.now(),
        queue_position=None,
        reason=reason,
        vnc_password=new_vnc_password(),
        eta=None,
        blocked=False,
        compute_units=units,
        warm_key=warm_key,
    )
    allocations = [
        Allocation(session_id=session_id, node_id=node, slice_id=sid)
        for node, ids in parts
        for sid in ids
    ] or [Allocation(session_id=session_id, node_id=node_id)]
    for allocation in allocations:
        allocation.save()
    AuditEvent.objects.create(
        kind=AuditKind.SESSION_PLACED,
        actor="scheduler",
        session_id=session_id,
        node_id=node_id,
        data={
            "slices": [sid for _, ids in parts for sid in ids],
            "nodes": [node for node, _ in parts],
            **(audit or {}),
        },
    )


def _apply_placement(placement: engine.Placement, snapshot: engine.Snapshot) -> bool:
    """Claim the session and its slices in one transaction; False if anything raced us."""
    by_id = {s.slice_id: s for s in snapshot.free_slices}
    parts = [(placement.node_id, placement.slice_ids), *placement.others]
    units = sum(by_id[sid].compute_units for _, ids in parts for sid in ids if sid in by_id)
    try:
        with transaction.atomic():
            place_session(
                placement.session_id,
                parts,
                units=units,
                reason="placed; waiting for the node to start the desktop",
            )
        return True
    except (IntegrityError, Conflict) as error:
        log.info("placement of session %s lost a race: %s", placement.session_id, error)
        return False


def _eta_text(eta, now) -> str:
    if eta is None:
        return ""
    if eta <= now + timedelta(seconds=30):
        return "; estimated start: any moment"
    return f"; estimated start {timezone.localtime(eta):%H:%M}"


def _apply_queue(entries: list[engine.QueueEntry], now) -> None:
    from portal.events import broadcast_session

    current = {
        s.pk: (s.queue_position, s.reason, s.blocked)
        for s in Session.objects.filter(pk__in=[e.session_id for e in entries])
    }
    for entry in entries:
        position = entry.position or None
        reason = (entry.reason + _eta_text(entry.eta, now))[:300]
        # The ETA moves a little every cycle: only a changed position or reason is pushed.
        if current.get(entry.session_id) == (position, reason, entry.blocked):
            continue
        with transaction.atomic():
            changed = Session.objects.filter(pk=entry.session_id, state__in=WAITING_STATES).update(
                queue_position=position, reason=reason, eta=entry.eta, blocked=entry.blocked
            )
            if changed:
                session_id = entry.session_id
                transaction.on_commit(lambda sid=session_id: broadcast_session(sid))


def _apply_preemption(p: engine.Preemption) -> bool:
    try:
        with transaction.atomic():
            do_transition(
                p.victim_id,
                SessionState.PREEMPTING,
                actor="scheduler",
                reason=p.reason[:300],
                only_from=frozenset({SessionState.RUNNING}),
                preempt_deadline=p.deadline,
                preempted_for_id=p.for_session_id,
            )
            AuditEvent.objects.create(
                kind=AuditKind.SESSION_PREEMPTED,
                actor="scheduler",
                session_id=p.victim_id,
                data={"for": p.for_session_id, "deadline": p.deadline.isoformat()},
            )
        return True
    except Conflict as error:
        log.info("preemption of session %s skipped: %s", p.victim_id, error)
        return False


def finish_grace_periods(now) -> int:
    """Preempted desktops whose grace ran out go back to the queue, keeping their age."""
    done = 0
    due = Session.objects.filter(state=SessionState.PREEMPTING, preempt_deadline__lte=now)
    for session_id in due.values_list("pk", flat=True):
        try:
            do_transition(
                session_id,
                SessionState.PREEMPTED,
                actor="scheduler",
                reason="preempted: back in the queue with its place kept; your home is kept",
                only_from=frozenset({SessionState.PREEMPTING}),
            )
            done += 1
        except Conflict:
            continue
    return done


def stop_overdue(now) -> int:
    """Running desktops past their profile's time limit are stopped."""
    stopped = 0
    for s in Session.objects.filter(
        state=SessionState.RUNNING, started_at__isnull=False
    ).select_related("profile"):
        limit = timedelta(minutes=s.profile.max_duration_minutes)
        if s.started_at + limit > now:
            continue
        try:
            do_transition(
                s.pk,
                SessionState.STOPPING,
                actor="scheduler",
                reason=f"stopping: the time limit of {s.profile.max_duration_minutes} min is up",
                only_from=frozenset({SessionState.RUNNING}),
            )
            stopped += 1
        except Conflict:
            continue
    return stopped


def _apply_alert(alert: engine.Alert | None) -> None:
    if alert is None:
        return
    from portal.events import broadcast_pool_alert

    with transaction.atomic():
        policy = PoolPolicy.objects.select_for_update().get(pk=PoolPolicy.current().pk)
        if policy.alert_level == alert.level:
            return
        previous = policy.alert_level
        policy.alert_level = alert.level
        policy.save(update_fields=["alert_level"])
        AuditEvent.objects.create(
            kind=AuditKind.POOL_ALERT,
            actor="scheduler",
            data={
                "level": alert.level,
                "previous": previous,
                "utilisation": round(alert.utilisation, 4),
                "message": alert.message,
            },
        )
        broadcast_pool_alert(alert.level, alert.utilisation, alert.message)
    log.warning("pool alert %s -> %s: %s", previous, alert.level, alert.message)


def do_scheduling_cycle(now=None) -> CycleResult:
    """Run one cycle. Callers hold the single-flight lock (see ``scheduling.tasks``)."""
    now = now or timezone.now()
    finish_grace_periods(now)
    stop_overdue(now)
    warm.prune_warm(now)
    snapshot = build_snapshot(now)
    # Booked students first take their class's READY warm desktops; the engine plans the rest.
    claimed = warm.claim_warm(snapshot, now)
    if claimed:
        snapshot = replace(
            snapshot, queue=tuple(r for r in snapshot.queue if r.session_id not in claimed)
        )
    result = engine.plan(snapshot, now)
    conflicts = 0
    placed = len(claimed)
    for placement in result.placements:
        if _apply_placement(placement, snapshot):
            placed += 1
        else:
            conflicts += 1
    for preemption in result.preemptions:
        _apply_preemption(preemption)
    _apply_queue(result.queue, now)
    _apply_alert(result.alert)
    warm.top_up_warm(snapshot, result, now)
    for note in result.notes:
        log.warning("cycle: %s", note)
    if placed or conflicts:
        log.info("cycle: placed %d, waiting %d, conflicts %d", placed, len(result.queue), conflicts)
    return CycleResult(placed=placed, waiting=len(result.queue), conflicts=conflicts)
