"""Usage records: one per run of a session, opened when it reaches RUNNING and closed when
the run ends.

``lifecycle`` calls :func:`on_transition` (or :func:`open_runs`, for an agent's batch of
desktops that started) inside the transition's transaction, before a run's holds are
released: RUNNING opens a record, leaving RUNNING (a terminal state, or back to the queue:
preempted, requeued off a lost node) closes it. ``accounting`` prices and sums them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from datetime import datetime
from decimal import Decimal

from django.db.models import Count, Q

from ..choices import TERMINAL_STATES, WAITING_STATES, SessionState
from ..models import Allocation, Session, UsageRecord
from ..rules import pricing
from . import billed
from .usage import department_of

RUN_ENDS = TERMINAL_STATES | WAITING_STATES | {SessionState.SUSPENDED}


def on_transition(
    session_id: int, target: SessionState, at: datetime, started_at: datetime | None = None
) -> None:
    """Open or close the session's usage record for a transition to ``target``."""
    if target == SessionState.RUNNING:
        open_runs({session_id: started_at or at})
    elif target in RUN_ENDS:
        close_run(session_id, at, target)


def _joined(values: Iterable[str]) -> str:
    return ",".join(sorted({v for v in values if v}))


def open_runs(starts: Mapping[int, datetime]) -> list[UsageRecord]:
    """A new record for each session's run that starts at ``starts[id]``, from its live
    holds; none for a session whose run is open already (a repeated report). In a fixed
    number of queries, however many sessions: an agent's batch reports fifty at once."""
    runs = (
        UsageRecord.objects.filter(session_id__in=list(starts))
        .values("session_id")
        .annotate(count=Count("id"), open=Count("id", filter=Q(ended_at=None)))
        .values_list("session_id", "count", "open")
    )
    counted: dict[int, tuple[int, int]] = {pk: (count, open_) for pk, count, open_ in runs}
    opening = [pk for pk in starts if not counted.get(pk, (0, 0))[1]]
    if not opening:
        return []
    sessions = Session.objects.select_related(
        "user", "user__member", "course", "profile", "node"
    ).filter(pk__in=opening)
    holds: dict[int, list[Allocation]] = defaultdict(list)
    live = Allocation.objects.filter(session_id__in=opening, released_at=None)
    for hold in live.select_related("slice__gpu", "node"):
        if hold.session_id is not None:
            holds[hold.session_id].append(hold)
    asked = billed.Asked()
    records = [
        _record(s, holds[s.pk], counted.get(s.pk, (0, 0))[0] + 1, starts[s.pk], asked)
        for s in sessions
    ]
    return UsageRecord.objects.bulk_create(records)


def _record(
    session: Session, holds: list[Allocation], run: int, start: datetime, asked: billed.Asked
) -> UsageRecord:
    """The run's record. Its kind, MIG profile, GPU share and compute units are the billed
    parts (``services.billed``: never more than the profile asked for); its GPU models and
    hosts where it ran."""
    slices = [h.slice for h in holds if h.slice is not None]
    ask = billed.Ask.of(session.profile)
    parts = asked.billed([(s.gpu.model, billed.part_of(s)) for s in slices], ask)
    hosts = _joined(h.node.hostname for h in holds)
    return UsageRecord(
        session=session,
        run=run,
        user=session.user,
        username=session.user.get_username(),
        course_code=session.course_code,
        department=department_of(session),
        purpose=session.purpose,
        profile_slug=session.profile.slug,
        booking_id=session.booking_id,
        slice_kind=_joined(p.kind for p in parts),
        mig_profile=_joined(p.profile for p in parts),
        gpu_model=_joined(s.gpu.model for s in slices),
        node_hostname=hosts or (session.node.hostname if session.node else ""),
        slices=len(slices),
        gpu_share=round(sum(p.milli for p in parts) / 1000, 4),
        compute_units=billed.units(parts) if parts else session.compute_units,
        started_at=start,
    )


def _utilisation(session_id: int) -> float | None:
    """The mean utilisation the agent last reported for the GPUs of the session's slices;
    None when any of them has no figure (a MIG instance's GPU often has none)."""
    holds = Allocation.objects.filter(
        session_id=session_id, released_at=None, slice__isnull=False
    ).select_related("slice__gpu")
    readings = [(h.slice.gpu.metrics or {}).get("utilization_pct") for h in holds if h.slice]
    numbers = [float(r) for r in readings if isinstance(r, int | float)]
    if not readings or len(numbers) != len(readings):
        return None
    return sum(numbers) / len(numbers)


def close_run(session_id: int, end: datetime, end_state: str) -> UsageRecord | None:
    """Close the session's open record at ``end`` with its hours; None if none is open."""
    record = UsageRecord.objects.filter(session_id=session_id, ended_at=None).first()
    if record is None:
        return None
    record.utilisation_pct = _utilisation(session_id)
    record.ended_at = max(end, record.started_at)
    record.end_state = end_state
    record.gpu_hours, record.cu_hours, record.idle_gpu_hours = _count(record, record.ended_at)
    stored = ["utilisation_pct", "ended_at", "end_state", "gpu_hours", "cu_hours"]
    record.save(update_fields=[*stored, "idle_gpu_hours"])
    return record


def measures(record: UsageRecord, until: datetime) -> tuple[Decimal, Decimal, Decimal]:
    """GPU-hours, CU-hours and idle GPU-hours of a record: as stored once closed, counted to
    ``until`` while open (idle hours are known only at the end of the run)."""
    if record.ended_at is not None:
        return record.gpu_hours, record.cu_hours, record.idle_gpu_hours
    return _count(record, until)


def _count(record: UsageRecord, until: datetime) -> tuple[Decimal, Decimal, Decimal]:
    hours = pricing.hours_between(record.started_at, record.ended_at or until)
    gpu_hours = pricing.held_hours(record.gpu_share, hours)
    cu_hours = pricing.held_hours(record.compute_units, hours)
    return gpu_hours, cu_hours, pricing.idle_hours(gpu_hours, record.utilisation_pct)
