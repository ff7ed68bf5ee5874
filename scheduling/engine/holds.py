"""Booking holds and backfill.

Every booking that starts within the hold horizon and has not ended holds capacity for its
seats not yet running (:func:`hold_bookings`); held slices leave the general pool. A booked
request takes its booking's hold first (:func:`own_hold`; one on its home's node, if any).
Anyone else may *backfill* a hold only if they end (now + expected duration) before the
booking starts (:func:`backfill`). Holds nobody took are in ``Plan.holds``
(:func:`standing`), where the portal starts warm desktops for the class.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import timedelta

from .model import BookingHold, FreeSlice, Placement, Plan, QueuedRequest, expected_duration_s
from .placement import best, homeward, tightest
from .pool import Cycle, Hold, Shape
from .reasons import Code, Reason


def hold_bookings(cycle: Cycle, result: Plan) -> None:
    """Hold capacity for the seats of upcoming bookings that will not be free in time anyway.

    A seat is covered, without holding anything, by a slice of a running session expected to
    end before the booking starts (the cycle stops desktops at their time limit), each such
    slice once. The seats left are held on free capacity, tightest slices first, so that a
    class of 8 GB seats does not hold whole GPUs while small slices are free; as a tie-break,
    on the nodes that keep homes of the class's students (``Booking.home_nodes``, one seat per
    home: :func:`~.placement.homeward`, :func:`~.placement.tightest`). Seats that do not fit
    get a ``Code.BOOKING_SHORT`` note.
    """
    now, policy = cycle.now, cycle.policy
    seated: dict[int, int] = defaultdict(int)
    for r in cycle.snapshot.running:
        if r.booking_id is not None and r.preempted_for is None:
            seated[r.booking_id] += 1
    freeing = sorted(
        (
            (s, r.ends_at)
            for r in cycle.snapshot.running
            if r.booking_id is None
            for s in r.slices
            if s.node_id in cycle.position
        ),
        key=lambda x: (x[0].milli, x[0].memory_mb, x[1], x[0].slice_id),
    )
    promised: set[int] = set()
    horizon = now + timedelta(seconds=policy.booking_hold_horizon_s)
    for b in sorted(cycle.snapshot.bookings, key=lambda b: (b.starts_at, b.booking_id)):
        if b.ends_at <= now or b.starts_at > horizon:
            continue
        need = max(0, b.seats - seated[b.booking_id])
        shape = cycle.shape_of(b.shape)
        if shape.gpu_count == 1 and b.starts_at > now:
            for s, ends in freeing:
                if need == 0:
                    break
                if ends <= b.starts_at and s.slice_id not in promised and cycle.fits(shape, s):
                    promised.add(s.slice_id)
                    need -= 1
        held = 0
        homes = dict(b.home_nodes)  # node: the class's homes there still without a seat
        for _ in range(need):
            if shape.gpu_count == 1:
                cand = tightest(cycle, shape, homes)
            else:
                cand = homeward(cycle, shape, best(cycle, shape), homes)
            if cand is None:
                break
            if homes.get(cand.node_id):
                homes[cand.node_id] -= 1
            cycle.take(cand.node_id, cand.slices, shape.cpus, shape.memory_mb, start=False)
            cycle.holds[b.booking_id].append(
                Hold(b, cand.node_id, cand.slices, shape.cpus, shape.memory_mb)
            )
            held += 1
        if held < need:
            result.notes.append(
                Reason(
                    Code.BOOKING_SHORT,
                    {"booking": b.booking_id, "course": b.course, "held": held, "need": need},
                )
            )


def hold_fits(cycle: Cycle, hold: Hold, shape: Shape) -> tuple[FreeSlice, ...] | None:
    """The hold's slices the shape would take (distinct GPUs), or None if it does not fit."""
    if shape.cpus > hold.cpus + cycle.cpus[hold.node_id]:
        return None
    if shape.memory_mb > hold.memory_mb + cycle.memory[hold.node_id]:
        return None
    fit = [s for s in hold.slices if cycle.fits(shape, s)]
    gpus: dict[int, FreeSlice] = {}
    for s in fit:
        gpus.setdefault(s.gpu_id, s)
    if len(gpus) < shape.gpu_count:
        return None
    return tuple(list(gpus.values())[: shape.gpu_count])


def _use_hold(cycle: Cycle, r: QueuedRequest, hold: Hold, got: tuple[FreeSlice, ...]) -> Placement:
    """Turn a hold into a placement: unused parts of the hold go back to the pool."""
    cycle.holds[hold.booking.booking_id].remove(hold)
    node_id = hold.node_id
    cycle.cpus[node_id] += hold.cpus - r.cpus
    cycle.memory[node_id] += hold.memory_mb - r.memory_mb
    cycle.smaller.clear()  # CPU and memory came back: a smaller slice there may fit again
    rest = [s for s in hold.slices if s not in got]
    if rest:
        cycle.give_back(node_id, rest)
    cycle.pending[node_id] += 1  # its desktop starts there now (before the touch re-scores)
    cycle.touch(node_id)
    return Placement(r.session_id, node_id, tuple(s.slice_id for s in got))


def own_hold(cycle: Cycle, r: QueuedRequest, shape: Shape) -> Placement | None:
    """A booked request on one of its booking's holds, if one fits it: one on a node of
    its home first (``r.home_nodes``, in their order), then the others as held."""
    if r.booking_id is None:
        return None
    holds = cycle.holds.get(r.booking_id, [])
    if r.home_nodes:
        rank = {node_id: i for i, node_id in enumerate(r.home_nodes)}
        holds = sorted(holds, key=lambda h: rank.get(h.node_id, len(rank)))
    for hold in holds:
        got = hold_fits(cycle, hold, shape)
        if got is not None:
            return _use_hold(cycle, r, hold, got)
    return None


def backfill(cycle: Cycle, r: QueuedRequest, shape: Shape) -> Placement | None:
    """A hold of a booking that starts after this request would end (earliest booking first)."""
    ends = cycle.now + timedelta(seconds=expected_duration_s(r, cycle.policy))
    for booking_id in sorted(cycle.holds, key=lambda b: cycle.bookings[b].starts_at):
        booking = cycle.bookings[booking_id]
        if booking_id == r.booking_id or ends > booking.starts_at:
            continue
        for hold in cycle.holds[booking_id]:
            got = hold_fits(cycle, hold, shape)
            if got is not None:
                return _use_hold(cycle, r, hold, got)
    return None


def standing(cycle: Cycle) -> list[BookingHold]:
    """The holds nobody took, by booking (start, id), each booking's in the order held."""
    out = []
    for booking_id in sorted(cycle.holds, key=lambda b: (cycle.bookings[b].starts_at, b)):
        for h in cycle.holds[booking_id]:
            ids = tuple(s.slice_id for s in h.slices)
            out.append(BookingHold(booking_id, h.node_id, ids, h.cpus, h.memory_mb))
    return out
