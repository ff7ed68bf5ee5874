"""Sick GPUs cordoned (docs/monitoring.md "Sick GPUs"): each heartbeat's GPU readings are
judged by ``scheduling.rules.gpu_health``; a GPU with a new fatal sign takes no new work
(its slices leave the snapshot's free slices), the desktops running on it are told (their
reason, live), and the "GPU cordoned" alert rule raises an alert that names the causes.
Only an admin lifts a cordon (:func:`do_uncordon_gpu`) or empties the GPU
(:func:`do_drain_gpu`); both are audited.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from nodeagent.protocol import GpuMetrics, to_wire

from ..choices import NODE_BOUND_STATES, AuditKind, SessionState
from ..engine.reasons import Code, Reason
from ..events import broadcast_session
from ..models import Gpu, Node, Session
from ..rules.gpu_health import gpu_causes, merge_causes
from . import Conflict
from .audit import record
from .health import ON_SILENCE
from .kick import schedule_soon
from .lifecycle import do_transition

log = logging.getLogger(__name__)

ACTOR = "health"
S = SessionState
# Where a drained GPU's sessions go: as a silent node's, but a stopping one is left to stop.
ON_DRAIN: dict[SessionState, SessionState] = {
    state: target for state, target in ON_SILENCE.items() if state != S.STOPPING
}


def cordoned_gpu_ids() -> frozenset[int]:
    """The GPUs whose slices take no new work."""
    return frozenset(Gpu.objects.filter(cordoned=True).values_list("pk", flat=True))


def holds_cordoned_gpu(session_id: int) -> bool:
    """Whether the session holds a slice of a cordoned GPU now (its page says so)."""
    return Gpu.objects.filter(
        cordoned=True,
        slices__allocation__session_id=session_id,
        slices__allocation__released_at=None,
    ).exists()


def _sessions_on(gpu: Gpu) -> list[int]:
    """The sessions holding a slice of the GPU now, oldest first."""
    return list(
        Session.objects.filter(
            state__in=NODE_BOUND_STATES,
            allocations__released_at=None,
            allocations__slice__gpu=gpu,
        )
        .order_by("pk")
        .values_list("pk", flat=True)
        .distinct()
    )


def do_judge_gpu_reports(node: Node, reports: Sequence[GpuMetrics], now: datetime) -> list[int]:
    """Cordon the node's GPUs whose report shows a new fatal sign (compared with the report
    before, still in ``Gpu.metrics``); the ids of the GPUs cordoned by this call. Called in
    the heartbeat's transaction, before it stores the new readings."""
    by_uuid = {report.uuid: report for report in reports}
    cordoned: list[int] = []
    for gpu in Gpu.objects.filter(node=node, uuid__in=by_uuid).order_by("pk"):
        causes = gpu_causes(gpu.metrics or {}, to_wire(by_uuid[gpu.uuid]))
        if causes and do_cordon_gpu(gpu, ACTOR, causes, now):
            cordoned.append(gpu.pk)
    return cordoned


def do_cordon_gpu(gpu: Gpu, actor: str, causes: Sequence[str], now: datetime | None = None) -> bool:
    """Take the GPU out of placement for ``causes``; True if it was not cordoned before. A
    GPU already cordoned keeps its cordon and adds the new causes to it."""
    now = now or timezone.now()
    with transaction.atomic():
        reason = merge_causes(gpu.cordon_reason if gpu.cordoned else "", causes)
        fresh = (
            Gpu.objects.filter(pk=gpu.pk, cordoned=False).update(
                cordoned=True, cordon_reason=reason, cordoned_at=now
            )
            == 1
        )
        if not fresh:
            current = Gpu.objects.filter(pk=gpu.pk).values_list("cordon_reason", flat=True)
            reason = merge_causes(current.first() or "", causes)
            Gpu.objects.filter(pk=gpu.pk).update(cordon_reason=reason)
        record(
            AuditKind.GPU_CORDONED,
            actor,
            node=gpu.node_id,
            data={"gpu": gpu.uuid, "index": gpu.index, "causes": list(causes), "new": fresh},
        )
        gpu.cordoned, gpu.cordon_reason = True, reason
        if fresh:
            gpu.cordoned_at = now
            _tell_sessions(gpu)
    if fresh:
        log.warning("GPU %s cordoned: %s", gpu.uuid, ", ".join(causes))
    return fresh


def _tell_sessions(gpu: Gpu) -> None:
    """The desktops on the GPU say so on their pages (their reason, sent live)."""
    node = Node.objects.filter(pk=gpu.node_id).values_list("hostname", flat=True).first()
    params: dict[str, Any] = {"node": node or "?", "gpu": gpu.index}
    for session_id in _sessions_on(gpu):
        Session.objects.filter(pk=session_id, state__in=NODE_BOUND_STATES).update(
            reason_code=Code.GPU_CORDONED, reason_params=params
        )
        broadcast_session(session_id)


def do_uncordon_gpu(gpu: Gpu, actor: str, reason: str) -> bool:
    """An admin puts the GPU back in service, saying why; False if it was not cordoned."""
    with transaction.atomic():
        cleared = (
            Gpu.objects.filter(pk=gpu.pk, cordoned=True).update(
                cordoned=False, cordon_reason="", cordoned_at=None
            )
            == 1
        )
        if cleared:
            record(
                AuditKind.GPU_CORDON_CLEARED,
                actor,
                node=gpu.node_id,
                data={
                    "gpu": gpu.uuid,
                    "index": gpu.index,
                    "reason": reason,
                    "before": {"cordoned": True, "cordon_reason": gpu.cordon_reason},
                    "after": {"cordoned": False, "cordon_reason": ""},
                },
            )
            schedule_soon()
    return cleared


def do_drain_gpu(gpu: Gpu, actor: str, reason: str) -> int:
    """An admin empties a GPU: it is cordoned (if it was not) and its desktops go back to
    the queue now, keeping their place by age; the number moved."""
    with transaction.atomic():
        if not gpu.cordoned:
            Gpu.objects.filter(pk=gpu.pk, cordoned=False).update(
                cordoned=True, cordon_reason="drained", cordoned_at=timezone.now()
            )
        moved = 0
        params = Reason(Code.GPU_DRAINED_REQUEUED, {"node": gpu.node.hostname, "gpu": gpu.index})
        for session_id in _sessions_on(gpu):
            state = Session.objects.filter(pk=session_id).values_list("state", flat=True).first()
            if state is None or SessionState(state) not in ON_DRAIN:
                continue  # stopping already
            target = ON_DRAIN[SessionState(state)]
            try:
                do_transition(
                    session_id,
                    target,
                    actor=actor,
                    reason=params,
                    only_from=frozenset({SessionState(state)}),
                )
            except Conflict:
                continue  # a report moved it meanwhile
            moved += 1
        record(
            AuditKind.GPU_DRAINED,
            actor,
            node=gpu.node_id,
            data={"gpu": gpu.uuid, "index": gpu.index, "reason": reason, "requeued": moved},
        )
        if moved:
            schedule_soon()
    return moved


__all__ = [
    "cordoned_gpu_ids",
    "do_cordon_gpu",
    "do_drain_gpu",
    "do_judge_gpu_reports",
    "do_uncordon_gpu",
    "holds_cordoned_gpu",
]
