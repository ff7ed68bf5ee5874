"""The activity store (docs/lifecycle.md): what the nodes' gateways and agents tell about a
running session, kept in one ``SessionActivity`` row per session, updated in
place. Input is counted and time-stamped, never stored; viewers are counted; utilisation
samples are kept for :data:`SAMPLE_WINDOW` (at most :data:`MAX_SAMPLES`). Each GPU sample
also adds to the open run's GPU-idle seconds (:func:`count_gpu_idle`, ``UsageRecord``), which
outlive the samples and the session (the console's idle hours, ``services.idle_hours``).

A gateway's reports (:mod:`.gateway_events`) call :func:`do_open_viewer` when it let someone
in to the screen, :func:`record_input` with a batch (every few seconds, not per event) and
:func:`viewer_closed`; :func:`do_open_sound` when it let someone hear the sound (an audit
event, no viewer). Each is one or two small queries (three more the first time, to make the
session's row). An agent's heartbeat records the usage of all its node's sessions with one
:func:`record_usage_many` (:func:`record_usage` is that for one session): at most eight
queries however many sessions it names: their rows read (where some are missing, three
more: which sessions exist, one insert, the new rows read back) and written with one bulk
update; with GPU figures, the open runs read, their idle policies read, and one update of
their GPU-idle seconds. None raises for a session that has gone (the row simply is not
written).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.db.models import Case, F, FloatField, Value, When
from django.db.models.functions import Greatest
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from ..choices import AuditKind
from ..idle_lookup import policies_of
from ..models import Session, SessionActivity, UsageRecord
from ..rules.idle_rules import Activity, Sample
from .audit import record, requests_from

SAMPLE_WINDOW = timedelta(hours=2)
MAX_SAMPLES = 480


def _row(session_id: int) -> bool:
    """Make sure the session's row exists; False when the session does not."""
    if SessionActivity.objects.filter(session_id=session_id).exists():
        return True
    if not Session.objects.filter(pk=session_id).exists():
        return False
    SessionActivity.objects.get_or_create(session_id=session_id)
    return True


def record_input(session_id: int, events: int, at: datetime | None = None) -> None:
    """``events`` keyboard and mouse events seen up to ``at`` (their count only)."""
    if events <= 0 or not _row(session_id):
        return
    at = at or timezone.now()
    SessionActivity.objects.filter(session_id=session_id).update(
        input_events=F("input_events") + events,
        last_input_at=Greatest(F("last_input_at"), at),
    )
    # Greatest() is NULL while last_input_at is: set the first one.
    SessionActivity.objects.filter(session_id=session_id, last_input_at=None).update(
        last_input_at=at
    )


def viewer_opened(session_id: int, at: datetime | None = None) -> None:
    if _row(session_id):
        SessionActivity.objects.filter(session_id=session_id).update(
            viewers=F("viewers") + 1, viewer_seen_at=at or timezone.now()
        )


def do_open_viewer(session_id: int, viewer: AbstractBaseUser, address: str | None = None) -> None:
    """The node's gateway let ``viewer`` in to the session's screen: one more viewer, and an
    audit event (docs/audit.md ``desktop.opened``) saying who, whose desktop, and whether they
    opened it as its owner or as an admin; from ``address``, the browser's as the gateway saw
    it."""
    session = Session.objects.filter(pk=session_id).select_related("user").first()
    if session is None:
        return
    viewer_opened(session_id)
    _audit_open(AuditKind.DESKTOP_OPENED, session, viewer, address)


def do_open_sound(session_id: int, listener: AbstractBaseUser, address: str | None = None) -> None:
    """The node's gateway let ``listener`` hear the session's sound: an audit event
    (docs/audit.md ``desktop.sound_opened``) with the same details as ``desktop.opened``.
    A listener is not a viewer: sound alone does not keep a desktop from idling."""
    session = Session.objects.filter(pk=session_id).select_related("user").first()
    if session is not None:
        _audit_open(AuditKind.DESKTOP_SOUND_OPENED, session, listener, address)


def _audit_open(
    kind: AuditKind, session: Session, person: AbstractBaseUser, address: str | None
) -> None:
    owner = session.user
    with requests_from(address):
        record(
            kind,
            f"user:{person.get_username()}",
            session=session,
            node=session.node_id,
            data={
                "viewer": person.get_username(),
                "owner": owner.get_username(),
                "as": "owner" if owner.pk == person.pk else "admin",
            },
        )


def viewer_closed(session_id: int, at: datetime | None = None) -> None:
    if _row(session_id):
        SessionActivity.objects.filter(session_id=session_id, viewers__gt=0).update(
            viewers=F("viewers") - 1, viewer_seen_at=at or timezone.now()
        )


def record_usage(
    session_id: int, gpu_pct: float | None, cpu_pct: float | None, at: datetime | None = None
) -> None:
    """One utilisation sample of one session: :func:`record_usage_many` for it alone."""
    record_usage_many({session_id: (gpu_pct, cpu_pct)}, at or timezone.now())


def record_usage_many(
    figures: Mapping[int, tuple[float | None, float | None]], at: datetime
) -> None:
    """One utilisation sample, taken at ``at``, of each session in ``figures`` (session id ->
    (GPU %, CPU %) of its own slice and container; None where the agent has no figure);
    nothing for a session that does not exist. Samples older than the window are dropped.
    One writer per session (its node's agent), so a read and a write suffice: the rows are
    read together and written with one bulk update, with the GPU-idle seconds they add
    (:func:`count_gpu_idle`), in one transaction."""
    if not figures:
        return
    rows = _rows_of(list(figures))
    if not rows:
        return
    horizon = at - SAMPLE_WINDOW
    previous: dict[int, datetime | None] = {}
    for row in rows:
        gpu_pct, cpu_pct = figures[row.session_id]
        kept = [s for s in row.samples if (t := parse_datetime(s[0])) is not None and t >= horizon]
        previous[row.session_id] = parse_datetime(kept[-1][0]) if kept else None
        kept.append([at.isoformat(), _pct(gpu_pct), _pct(cpu_pct)])
        row.samples = kept[-MAX_SAMPLES:]
    with transaction.atomic():
        SessionActivity.objects.bulk_update(rows, ["samples"])
        count_gpu_idle({pk: figures[pk][0] for pk in previous}, previous, at)


def _rows_of(session_ids: Sequence[int]) -> list[SessionActivity]:
    """The sessions' rows, made where missing for the sessions that exist (by session id):
    one query when all are there, four when some are missing, whatever their number."""
    rows = list(SessionActivity.objects.filter(session_id__in=session_ids))
    missing = set(session_ids) - {row.session_id for row in rows}
    if missing:
        existing = list(Session.objects.filter(pk__in=missing).values_list("pk", flat=True))
        if existing:
            SessionActivity.objects.bulk_create(
                [SessionActivity(session_id=pk) for pk in existing], ignore_conflicts=True
            )
            # Read back: a row another writer made meanwhile is kept as it is.
            rows += SessionActivity.objects.filter(session_id__in=existing)
    return sorted(rows, key=lambda row: row.session_id)


def sample_gap() -> timedelta:
    """The longest stretch one sample speaks for: two heartbeats. A longer silence (an agent
    away, a portal restarted) counts this much, not the whole gap."""
    return timedelta(seconds=2 * settings.AGENT_HEARTBEAT_INTERVAL_S)


def count_gpu_idle(
    gpu_pcts: Mapping[int, float | None],
    previous: Mapping[int, datetime | None],
    at: datetime,
) -> None:
    """For each session (id -> its GPU %, and the time of its previous sample or None), add
    the time since the previous sample (or the run's start), at most :func:`sample_gap`, to
    the open run's GPU-idle seconds, times the GPUs it holds (``UsageRecord.gpu_share``, as
    accounting counts GPU-hours), when the GPU was under its policy's ``gpu_idle_pct``. A
    CPU-only run, or a sample without a GPU figure, adds nothing. Three queries whatever
    the number of sessions: the open runs, their policies, one update."""
    measured = {pk: gpu for pk, gpu in gpu_pcts.items() if gpu is not None}
    if not measured:
        return
    runs = list(
        UsageRecord.objects.filter(
            session_id__in=measured, ended_at=None, gpu_share__gt=0
        ).select_related("session")
    )
    policies = policies_of(run.session for run in runs if run.session is not None)
    added: dict[int, float] = {}
    for run in runs:
        session = run.session
        if session is None or measured[session.pk] >= policies[session.pk].gpu_idle_pct:
            continue
        last = previous.get(session.pk)
        since = max(last, run.started_at) if last is not None else run.started_at
        seconds = min(max(at - since, timedelta(0)), sample_gap()).total_seconds()
        if seconds > 0:
            added[run.pk] = run.gpu_share * seconds
    if added:
        per_run = Case(
            *(When(pk=pk, then=Value(more)) for pk, more in added.items()),
            default=Value(0.0),
            output_field=FloatField(),
        )
        UsageRecord.objects.filter(pk__in=added, ended_at=None).update(
            gpu_idle_seconds=F("gpu_idle_seconds") + per_run
        )


def _pct(value: float | None) -> float | None:
    return None if value is None else round(max(0.0, float(value)), 2)


def forget(session_id: int) -> None:
    """A fresh start for a session placed again (resumed): nothing of the last run counts."""
    SessionActivity.objects.filter(session_id=session_id).update(
        input_events=0,
        last_input_at=None,
        viewers=0,
        samples=[],
        limit_warned=0,
        limit_warned_for=None,
    )


def activity_of(session: Session, row: SessionActivity | None) -> Activity:
    """The pure decision's view of a running session's activity."""
    started = session.started_at or session.placed_at or session.created_at
    if row is None:
        return Activity(started_at=started)
    samples = []
    for at, gpu, cpu in row.samples:
        moment = parse_datetime(at)
        if moment is not None:
            samples.append(Sample(moment, gpu, cpu))
    return Activity(
        started_at=started,
        last_input_at=row.last_input_at,
        viewers=row.viewers,
        samples=tuple(samples),
    )
