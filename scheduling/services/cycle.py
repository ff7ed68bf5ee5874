"""One scheduling cycle: read a snapshot, ask the engine for a plan, apply it."""

from __future__ import annotations

import logging
import secrets
from collections import defaultdict
from dataclasses import dataclass

from django.db import IntegrityError, transaction
from django.db.models import Sum
from django.utils import timezone

from .. import engine
from ..choices import WAITING_STATES, AuditKind, SessionState
from ..models import Allocation, AuditEvent, Node, Session, Slice
from . import Conflict
from .lifecycle import do_transition

log = logging.getLogger(__name__)

VNC_PASSWORD_ALPHABET = "abcdefghijkmnopqrstuvwxyzACDEFGHJKLMNPQRSTUVWXYZ23456789"


@dataclass(frozen=True)
class CycleResult:
    placed: int
    waiting: int
    conflicts: int


def build_snapshot(now=None) -> engine.Snapshot:
    """The pool as the engine sees it: node headroom, free slices, the waiting queue."""
    now = now or timezone.now()
    used = defaultdict(lambda: (0.0, 0))
    for row in (
        Session.objects.on_node()
        .values("node_id")
        .annotate(cpus=Sum("profile__cpus"), memory=Sum("profile__memory_mb"))
    ):
        used[row["node_id"]] = (row["cpus"] or 0.0, row["memory"] or 0)
    nodes = tuple(
        engine.NodeState(
            node_id=node.pk,
            hostname=node.hostname,
            healthy=node.is_healthy(now),
            cpus_free=node.cpu_count - used[node.pk][0],
            memory_free_mb=node.memory_mb - used[node.pk][1],
        )
        for node in Node.objects.all()
    )
    held = Allocation.objects.filter(released_at=None, slice__isnull=False).values("slice_id")
    free_slices = tuple(
        engine.FreeSlice(
            slice_id=s.pk,
            node_id=s.gpu.node_id,
            gpu_id=s.gpu_id,
            kind=s.kind,
            memory_mb=s.memory_mb,
            gpu_model=s.gpu.model,
        )
        for s in Slice.objects.filter(present=True, gpu__present=True)
        .exclude(pk__in=held)
        .select_related("gpu")
    )
    queue = tuple(
        engine.QueuedRequest(
            session_id=s.pk,
            tier=s.tier,
            submitted_at=s.created_at,
            gpu_count=s.profile.gpu_count,
            gpu_memory_min_mb=s.profile.gpu_memory_min_mb,
            allowed_kinds=tuple(s.profile.allowed_kinds),
            cpus=s.profile.cpus,
            memory_mb=s.profile.memory_mb,
        )
        for s in Session.objects.filter(state__in=WAITING_STATES).select_related("profile")
    )
    return engine.Snapshot(nodes=nodes, free_slices=free_slices, queue=queue)


def _apply_placement(placement: engine.Placement) -> bool:
    """Claim the session and its slices in one transaction; False if anything raced us."""
    try:
        with transaction.atomic():
            do_transition(
                placement.session_id,
                SessionState.PLACED,
                actor="scheduler",
                only_from=frozenset(WAITING_STATES),
                node_id=placement.node_id,
                placed_at=timezone.now(),
                queue_position=None,
                reason="placed; waiting for the node to start the desktop",
                vnc_password="".join(secrets.choice(VNC_PASSWORD_ALPHABET) for _ in range(8)),
            )
            allocations = [
                Allocation(session_id=placement.session_id, node_id=placement.node_id, slice_id=sid)
                for sid in placement.slice_ids
            ] or [Allocation(session_id=placement.session_id, node_id=placement.node_id)]
            for allocation in allocations:
                allocation.save()
            AuditEvent.objects.create(
                kind=AuditKind.SESSION_PLACED,
                actor="scheduler",
                session_id=placement.session_id,
                node_id=placement.node_id,
                data={"slices": list(placement.slice_ids)},
            )
        return True
    except (IntegrityError, Conflict) as error:
        log.info("placement of session %s lost a race: %s", placement.session_id, error)
        return False


def _apply_queue(entries: list[engine.QueueEntry]) -> None:
    from portal.events import broadcast_session

    current = {
        s.pk: (s.queue_position, s.reason)
        for s in Session.objects.filter(pk__in=[e.session_id for e in entries])
    }
    for entry in entries:
        if current.get(entry.session_id) == (entry.position, entry.reason):
            continue
        with transaction.atomic():
            changed = Session.objects.filter(pk=entry.session_id, state__in=WAITING_STATES).update(
                queue_position=entry.position, reason=entry.reason
            )
            if changed:
                session_id = entry.session_id
                transaction.on_commit(lambda sid=session_id: broadcast_session(sid))


def do_scheduling_cycle(now=None) -> CycleResult:
    """Run one cycle. Callers hold the single-flight lock (see ``scheduling.tasks``)."""
    now = now or timezone.now()
    snapshot = build_snapshot(now)
    result = engine.plan(snapshot, now)
    conflicts = 0
    placed = 0
    for placement in result.placements:
        if _apply_placement(placement):
            placed += 1
        else:
            conflicts += 1
    _apply_queue(result.queue)
    if placed or conflicts:
        log.info("cycle: placed %d, waiting %d, conflicts %d", placed, len(result.queue), conflicts)
    return CycleResult(placed=placed, waiting=len(result.queue), conflicts=conflicts)
