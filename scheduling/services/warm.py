"""The warm pool: desktops started ahead for a class booking, claimed by its students.

Each scheduling cycle (:func:`scheduling.services.cycle.do_scheduling_cycle`):

1. :func:`prune_warm` drops warm desktops the pool no longer wants (booking cancelled,
   over, or no longer near; node unhealthy) and gives failed ones a new key once their
   retry time has come.
2. The snapshot leaves warm desktops' held slices out of the free pool, counts their profile's
   CPU and memory as used on their node, and lowers their booking's seats by their number
   (the engine holds capacity only for the seats no warm desktop covers).
3. :func:`claim_warm` places waiting requests of a booking on warm desktops of that
   booking, READY ones first, in order of arrival and within quotas: the session gets the
   warm desktop's slice (and, when it is READY, its ``warm_key``), the warm row goes; the
   engine plans the rest of the queue.
4. :func:`top_up_warm` starts warm desktops on the booking holds the engine's plan chose
   (``Plan.holds``), one for every seat not yet taken (``WARM_MAX_PER_BOOKING``, when set,
   caps them per booking; 0 turns the warm pool off).

A warm desktop holds its slice (or its node, for a CPU-only profile) through an
:class:`~scheduling.models.Allocation` row, like a session: one partial unique index covers
every hold. A claim moves that row to the session with a conditional UPDATE; a cycle's claims
are applied together (one UPDATE, the placements and one DELETE for all of them), or one by
one when one of them raced.

The agent learns its warm desktops from ``desired/`` and reports READY or FAILED to
``warm/<key>/report/`` (:func:`do_warm_report`).
"""

from __future__ import annotations

import logging
import operator
import secrets
from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime, timedelta
from functools import reduce

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import BigIntegerField, Case, Count, Q, QuerySet, Value, When
from django.utils import timezone
from django.utils.translation import gettext as _

from nodeagent.protocol import DesiredWarm, WarmReport

from .. import engine
from ..choices import ON_NODE_STATES, WAITING_STATES, SessionState
from ..engine.reasons import Code, Reason
from ..locks import lock_warm
from ..models import Allocation, Booking, Node, Session, WarmDesktop, WarmState
from . import Conflict
from .agent_wake import wake_nodes
from .kick import schedule_soon
from .placement import Placed, place_session, place_sessions

log = logging.getLogger(__name__)

WARM_RETRY_MAX_FACTOR = 16


def lead() -> timedelta:
    return timedelta(minutes=settings.WARM_LEAD_MINUTES)


def warm_bookings(now: datetime) -> QuerySet[Booking]:
    """Bookings that get warm desktops now: not cancelled, open or starting within the lead.

    Only one-GPU (or CPU-only) profiles: a desktop runs on one slice.
    """
    return Booking.objects.filter(
        cancelled_at=None,
        ends_at__gt=now,
        starts_at__lte=now + lead(),
        profile__gpu_count__lte=1,
    )


def new_key(booking_id: int) -> str:
    """A warm desktop's key: ``b<booking>-<8 hex>``, new for every (re)try."""
    return f"b{booking_id}-{secrets.token_hex(4)}"


def desired_warm(node: Node, now: datetime | None = None) -> list[DesiredWarm]:
    """The warm desktops this node's agent should keep started now."""
    now = now or timezone.now()
    rows = (
        WarmDesktop.objects.filter(
            node=node,
            state__in=[WarmState.STARTING, WarmState.READY],
            booking__in=warm_bookings(now),
        )
        .select_related("booking__course", "booking__profile")
        .prefetch_related("holds__slice")
        .order_by("pk")
    )
    return [
        DesiredWarm(
            key=w.key,
            booking=w.booking_id,
            course=w.booking.course.code,
            image=w.booking.profile.image,
            cpus=w.booking.profile.cpus,
            memory_mb=w.booking.profile.memory_mb,
            pids_limit=w.booking.profile.pids_limit,
            shm_mb=w.booking.profile.shm_mb,
            gpu_devices=[
                h.slice.device_uuid for h in w.holds.all() if h.slice and h.released_at is None
            ],
        )
        for w in rows
    ]


def do_warm_report(node: Node, key: str, report: WarmReport) -> WarmDesktop:
    """READY or FAILED from the agent; Conflict when the portal no longer wants that desktop."""
    report = WarmReport.model_validate(report)  # the wire model; a mapping is validated too
    now = timezone.now()
    with transaction.atomic():
        warm = lock_warm(key=key, node=node, booking__in=warm_bookings(now))
        if warm is None:
            raise Conflict(
                _("Warm desktop %(key)s is not wanted on %(node)s; stop it.")
                % {"key": key, "node": node.hostname}
            )
        if report.state == "READY":
            if warm.state == WarmState.FAILED:
                raise Conflict(
                    _("Warm desktop %(key)s was reported FAILED; stop it.") % {"key": key}
                )
            warm.state = WarmState.READY
            warm.port = report.port
            warm.container_id = report.container_id
            warm.ready_at = now
            warm.reason = ""
            warm.save(update_fields=["state", "port", "container_id", "ready_at", "reason"])
            # A booked student may be waiting for it.
            if Session.objects.filter(
                booking_id=warm.booking_id, state__in=WAITING_STATES
            ).exists():
                schedule_soon()
        else:
            factor = min(2**warm.failures, WARM_RETRY_MAX_FACTOR)
            warm.state = WarmState.FAILED
            warm.failures += 1
            warm.reason = report.reason[:300]
            warm.retry_at = now + timedelta(seconds=settings.WARM_RETRY_S * factor)
            warm.save(update_fields=["state", "failures", "reason", "retry_at"])
            log.warning(
                "warm desktop %s on %s failed (%d in a row), retry at %s: %s",
                key,
                node.hostname,
                warm.failures,
                warm.retry_at,
                warm.reason,
            )
    return warm


def drop_warm(booking: Booking) -> int:
    """Forget a booking's unclaimed warm desktops and their holds (agents stop them)."""
    return _delete(WarmDesktop.objects.filter(booking=booking))


def _delete(rows: QuerySet[WarmDesktop]) -> int:
    """Delete warm desktops (their holds go with them) and wake their nodes' agents."""
    nodes = set(rows.values_list("node_id", flat=True))
    _, deleted = rows.delete()
    wake_nodes(nodes)
    return deleted.get(WarmDesktop._meta.label, 0)


def prune_warm(now: datetime) -> None:
    """Drop warm desktops no longer wanted; give failed ones whose time has come a new key."""
    wanted = warm_bookings(now)
    _delete(WarmDesktop.objects.exclude(booking__in=wanted))
    unhealthy = [n.pk for n in Node.objects.all() if not n.is_healthy(now)]
    _delete(WarmDesktop.objects.filter(node_id__in=unhealthy))
    for warm in WarmDesktop.objects.filter(state=WarmState.FAILED, retry_at__lte=now):
        WarmDesktop.objects.filter(pk=warm.pk, state=WarmState.FAILED).update(
            key=new_key(warm.booking_id), state=WarmState.STARTING, retry_at=None
        )
        wake_nodes([warm.node_id])


def claim_warm(snapshot: engine.Snapshot, now: datetime) -> set[int]:
    """Place waiting booked requests on their booking's warm desktops; their session ids.

    A READY one is claimed: the session gets its hold and ``warm_key`` and the agent hands
    over the running container. Without a READY one a request still gets the hold of a
    STARTING or FAILED one of its booking (no key: the agent stops that warm desktop and
    starts the session's afresh), so warm desktops never keep a class from its capacity.
    Who gets one goes by arrival (and quotas); which one, by :func:`seat`: a student whose
    home a node keeps gets a warm desktop there when one of the best state left is. The
    claims are decided first, then applied together (:func:`claim_many`).
    """
    rows: dict[int, list[WarmDesktop]] = defaultdict(list)
    for warm in sorted(
        WarmDesktop.objects.all(), key=lambda w: (_rank(w), w.ready_at or now, w.pk)
    ):
        rows[warm.booking_id].append(warm)
    if not rows:
        return set()
    quotas = engine.index_quotas(snapshot.quotas)
    extra: dict[tuple[str, str], int] = defaultdict(int)
    seated: dict[int, list[engine.QueuedRequest]] = defaultdict(list)
    booked = [r for r in snapshot.queue if r.booking_id in rows]
    for r in sorted(booked, key=lambda r: (r.submitted_at, r.session_id)):
        booking_id = r.booking_id or 0
        if len(seated[booking_id]) >= len(rows[booking_id]):
            continue
        if engine.quota_block(r, quotas, extra):
            continue
        seated[booking_id].append(r)
        engine.count_session(r, quotas, extra)
    return claim_many([pick for b, some in seated.items() for pick in seat(some, rows[b])])


def _rank(warm: WarmDesktop) -> int:
    """READY first (claimed running), then STARTING, then FAILED."""
    return {WarmState.READY: 0, WarmState.STARTING: 1, WarmState.FAILED: 2}[WarmState(warm.state)]


def seat(
    requests: Sequence[engine.QueuedRequest], rows: Sequence[WarmDesktop]
) -> list[tuple[int, WarmDesktop]]:
    """Which warm desktop of a booking each request gets (``rows`` in the order of
    :func:`claim_warm`, at least as many): first, in arrival order, each request whose
    person's home a node keeps (``QueuedRequest.home_nodes``, in their order) takes one on
    that node, if one there is of the best state left (READY over STARTING: the home is a
    tie-break, not worth a cold start); then the others take the rest in order."""
    free = list(rows)
    picks: dict[int, WarmDesktop] = {}
    for r in requests:
        if not r.home_nodes or not free:
            continue
        best = _rank(free[0])
        for node_id in r.home_nodes:
            home = next((w for w in free if w.node_id == node_id and _rank(w) == best), None)
            if home is not None:
                free.remove(home)
                picks[r.session_id] = home
                break
    for r in requests:
        if r.session_id not in picks:
            picks[r.session_id] = free.pop(0)
    return [(r.session_id, picks[r.session_id]) for r in requests]


def claim_many(picks: Sequence[tuple[int, WarmDesktop]]) -> set[int]:
    """Claims ``(session id, warm desktop)``, together in one transaction and a fixed number
    of queries: the holds move in one UPDATE, the sessions are placed by
    ``placement.place_sessions``, the warm rows go in one DELETE; the students' pages and the
    agents hear of them all at its commit. When one of them raced (a session no longer
    waiting, a hold moved or gone), that transaction rolls back and each is claimed on its
    own (:func:`claim`), the racing ones skipped. The session ids claimed."""
    if not picks:
        return set()
    try:
        with transaction.atomic():
            _claim_together(picks)
        return {session_id for session_id, _ in picks}
    except (IntegrityError, Conflict) as error:
        log.info(
            "claiming %d warm desktops together lost a race (%s): one by one", len(picks), error
        )
    return {session_id for session_id, warm in picks if claim(session_id, warm)}


def _claim_together(picks: Sequence[tuple[int, WarmDesktop]]) -> None:
    """What :func:`claim` does for each pick, for all of them at once; Conflict on a race."""
    by_warm = {warm.pk: (session_id, warm) for session_id, warm in picks}
    same = reduce(operator.or_, (Q(warm_id=w.pk, warm__key=w.key) for _, w in picks))
    holds = list(
        Allocation.objects.filter(same, session=None, released_at=None)
        .select_related("slice__gpu")
        .order_by("pk")
    )
    if {h.warm_id for h in holds} != by_warm.keys():
        raise Conflict(_("Some of these warm desktops were claimed or dropped meanwhile."))
    owner = Case(
        *[When(warm_id=w, then=Value(s)) for w, (s, _) in by_warm.items()],
        output_field=BigIntegerField(),
    )
    moved = Allocation.objects.filter(
        pk__in=[h.pk for h in holds], warm_id__in=list(by_warm), session=None, released_at=None
    ).update(session_id=owner, warm=None)
    if moved != len(holds):
        raise Conflict(_("Some of these warm desktops were claimed or dropped meanwhile."))
    place_sessions(
        [
            _placement(session_id, warm, [h for h in holds if h.warm_id == warm_id])
            for warm_id, (session_id, warm) in by_warm.items()
        ]
    )
    # Their nodes' agents are woken once, by the placements (the new sessions on them).
    WarmDesktop.objects.filter(pk__in=list(by_warm)).delete()


def _placement(session_id: int, warm: WarmDesktop, holds: Sequence[Allocation]) -> Placed:
    """The claim's placement: on the warm desktop's node, with the compute units of the holds
    it takes over, its key when READY (the agent hands over the running container), and the
    audit record (slices, node, warm key, booking)."""
    ready = warm.state == WarmState.READY
    key = warm.key if ready else ""
    units = sum(h.slice.gpu.compute_units * h.slice.milli / 1000 for h in holds if h.slice)
    return Placed(
        session_id,
        warm.node_id,
        units=round(units, 4),
        reason=Reason(Code.PLACED_WARM if ready else Code.PLACED_SEAT),
        warm_key=key,
        audit={
            "slices": [h.slice_id for h in holds if h.slice_id],
            "nodes": [warm.node_id],
            "warm_key": key,
            "booking": warm.booking_id,
        },
    )


def claim(session_id: int, warm: WarmDesktop) -> bool:
    """Move the warm desktop's hold to the session (one conditional UPDATE) and place it.

    False when another claim, or the warm desktop's removal, got there first.
    """
    try:
        with transaction.atomic():
            moved = Allocation.objects.filter(
                warm_id=warm.pk, warm__key=warm.key, session=None, released_at=None
            ).update(session_id=session_id, warm=None)
            if moved == 0:
                return False
            holds = list(
                Allocation.objects.filter(session_id=session_id, released_at=None).select_related(
                    "slice__gpu"
                )
            )
            one = _placement(session_id, warm, holds)
            place_session(
                one.session_id,
                one.node_id,
                units=one.units,
                reason=one.reason,
                warm_key=one.warm_key,
                audit=one.audit,
            )
            _delete(WarmDesktop.objects.filter(pk=warm.pk))
        return True
    except (IntegrityError, Conflict) as error:
        log.info("claim of warm desktop %s by %s lost a race: %s", warm.key, session_id, error)
        return False


def top_up_warm(snapshot: engine.Snapshot, result: engine.Plan, now: datetime) -> int:
    """Start warm desktops on the booking holds of the plan, for bookings near their window.

    Per booking: ``seats - sessions holding capacity for it`` warm desktops (at most
    ``WARM_MAX_PER_BOOKING`` when that is set); extras (a seat got taken) go, failed and
    starting ones first. Returns how many were added.
    """
    bookings = list(warm_bookings(now))
    if not bookings:
        return 0
    taken = dict(
        Session.objects.filter(
            booking__in=[b.pk for b in bookings],
            state__in=ON_NODE_STATES | {SessionState.STOPPING},
        )
        .values_list("booking_id")
        .annotate(n=Count("pk"))
        .values_list("booking_id", "n")
    )
    placed_ids = {p.session_id for p in result.placements}
    for r in snapshot.queue:
        if r.session_id in placed_ids and r.booking_id is not None:
            taken[r.booking_id] = taken.get(r.booking_id, 0) + 1
    rank = {WarmState.FAILED: 0, WarmState.STARTING: 1, WarmState.READY: 2}
    needed: dict[int, int] = {}
    cap = settings.WARM_MAX_PER_BOOKING  # None: every seat
    for b in bookings:
        free = b.seats - taken.get(b.pk, 0)
        target = max(0, free if cap is None else min(free, cap))
        rows = sorted(
            WarmDesktop.objects.filter(booking=b),
            key=lambda w: (rank[WarmState(w.state)], -w.pk),
        )
        extra = len(rows) - target
        if extra > 0:
            _delete(WarmDesktop.objects.filter(pk__in=[w.pk for w in rows[:extra]]))
        elif extra < 0:
            needed[b.pk] = -extra
    added = 0
    for hold in result.holds:
        if needed.get(hold.booking_id, 0) <= 0 or len(hold.slice_ids) > 1:
            continue
        if _start_warm(hold):
            needed[hold.booking_id] -= 1
            added += 1
    if added:
        log.info("warm pool: %d desktop(s) to start", added)
    return added


def _start_warm(hold: engine.BookingHold) -> bool:
    """A warm desktop on one of the plan's booking holds; False if the slice got taken."""
    try:
        with transaction.atomic():
            warm = WarmDesktop.objects.create(
                booking_id=hold.booking_id, node_id=hold.node_id, key=new_key(hold.booking_id)
            )
            Allocation.objects.create(
                warm=warm,
                node_id=hold.node_id,
                slice_id=hold.slice_ids[0] if hold.slice_ids else None,
            )
            wake_nodes([hold.node_id])
        return True
    except IntegrityError as error:
        log.info("warm desktop for booking %s lost a race: %s", hold.booking_id, error)
        return False
