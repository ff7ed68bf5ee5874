"""Does a class booking fit the pool? Pure arithmetic over plain records (no Django).

A booking of ``seats`` desktops of a profile in ``[starts_at, ends_at)`` fits when the pool's
slices that profile can use hold its seats next to every other booking overlapping it in
time. The count never confirms what the pool cannot hold:

- Only slices of nodes that are not cordoned count (``PoolSlice.available``); whether a node
  answers its heartbeats today says nothing about next week, so health is not looked at.
- Every overlapping booking keeps its seats first (they were confirmed before): the window
  is cut where other bookings start or end, and in each piece the slices are shared out by a
  maximum flow (bookings to the slices each can use), so another profile's booking takes
  exactly the slices the two share when it must. What is left for the new booking in its
  tightest piece is what it can have.
- A desktop of ``gpu_count`` GPUs counts as that many slices (conservative: they must also
  be on one node, which is not checked).
- A CPU-only profile (``gpu_count`` 0) books node CPU and memory instead: the CPU and memory
  of the available nodes, less what overlapping bookings (of every profile) take, divided
  by what one desktop needs.

:func:`booking_fit` answers for one window, :func:`booking_alternatives` finds the nearest
ones that fit: fewer seats, another time, another profile.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

# Why a booking fits or not (``BookingFit.code``); the portal words them.
FITS = "fits"
NO_FITTING_SLICES = "no_fitting_slices"  # no slice of the pool can run this profile
POOL_TOO_SMALL = "pool_too_small"  # the pool cannot hold these seats even when empty
TAKEN_BY_BOOKINGS = "taken_by_bookings"  # other bookings at that time leave too little
NO_NODE_ROOM = "no_node_room"  # CPU-only: not enough CPU or memory on the nodes

UNLIMITED = 10**6  # seats of a desktop that needs neither CPU nor memory

ALTERNATIVE_SEATS = "seats"
ALTERNATIVE_TIME = "time"
ALTERNATIVE_PROFILE = "profile"


@dataclass(frozen=True)
class PoolSlice:
    """A slice of the pool, busy or not."""

    slice_id: int
    node_id: int
    kind: str  # mig | share | whole
    memory_mb: int
    gpu_model: str
    compute_units: float = 1.0
    available: bool = True  # False on a cordoned node or a GPU gone


@dataclass(frozen=True)
class PoolNode:
    node_id: int
    cpus: float
    memory_mb: int
    available: bool = True


@dataclass(frozen=True)
class Needs:
    """What one desktop of a profile needs."""

    profile_id: int
    gpu_count: int
    kinds: tuple[str, ...]
    gpu_memory_min_mb: int = 0
    gpu_models: tuple[str, ...] = ()  # substrings of the model name; empty = any
    compute_min: float = 0.0
    cpus: float = 0.0
    memory_mb: int = 0
    name: str = ""


@dataclass(frozen=True)
class HeldBooking:
    """A booking already confirmed: its seats are taken first."""

    booking_id: int
    needs: Needs
    seats: int
    starts_at: datetime
    ends_at: datetime
    label: str = ""  # how a person recognises it (course code)


@dataclass(frozen=True)
class Pool:
    slices: tuple[PoolSlice, ...]
    nodes: tuple[PoolNode, ...] = ()


@dataclass(frozen=True)
class BookingFit:
    fits: bool
    seats: int  # asked for
    most_seats: int  # the most seats that fit then (0: none)
    capacity: int  # seats the pool could hold then with no other booking
    code: str  # FITS, NO_FITTING_SLICES, POOL_TOO_SMALL, TAKEN_BY_BOOKINGS, NO_NODE_ROOM
    blocking: tuple[str, ...] = ()  # labels of the overlapping bookings that take capacity
    slices: int = 0  # slices of the pool this profile can use (GPU profiles)
    need: int = 0  # slices the seats need (seats x gpu_count)


@dataclass(frozen=True)
class Alternative:
    kind: str  # ALTERNATIVE_SEATS, ALTERNATIVE_TIME or ALTERNATIVE_PROFILE
    seats: int
    starts_at: datetime
    ends_at: datetime
    profile_id: int
    profile_name: str = ""


@dataclass
class _Flow:
    """A small max-flow graph (Edmonds–Karp); nodes are strings."""

    cap: dict[str, dict[str, float]] = field(default_factory=lambda: defaultdict(dict))

    def add(self, a: str, b: str, capacity: float) -> None:
        self.cap[a][b] = self.cap[a].get(b, 0) + capacity
        self.cap[b].setdefault(a, 0)

    def push(self, source: str, sink: str) -> float:
        total = 0.0
        while True:
            parent: dict[str, str] = {source: source}
            todo = deque([source])
            while todo and sink not in parent:
                here = todo.popleft()
                for there, left in self.cap[here].items():
                    if left > 0 and there not in parent:
                        parent[there] = here
                        todo.append(there)
            if sink not in parent:
                return total
            path = []
            node = sink
            while node != source:
                path.append((parent[node], node))
                node = parent[node]
            amount = min(self.cap[a][b] for a, b in path)
            for a, b in path:
                self.cap[a][b] -= amount
                self.cap[b][a] += amount
            total += amount


def can_use(needs: Needs, s: PoolSlice) -> bool:
    """Could one GPU of this profile run on this slice?"""
    if not s.available or s.kind not in needs.kinds or s.memory_mb < needs.gpu_memory_min_mb:
        return False
    if s.compute_units < needs.compute_min:
        return False
    model = s.gpu_model.lower()
    return not needs.gpu_models or any(m.lower() in model for m in needs.gpu_models)


def overlaps(b: HeldBooking, starts_at: datetime, ends_at: datetime) -> bool:
    return b.starts_at < ends_at and b.ends_at > starts_at


def _pieces(
    starts_at: datetime, ends_at: datetime, others: Sequence[HeldBooking]
) -> list[list[HeldBooking]]:
    """The overlapping bookings active in each piece of the window between their edges."""
    edges = {starts_at, ends_at}
    for b in others:
        edges.update(t for t in (b.starts_at, b.ends_at) if starts_at < t < ends_at)
    cuts = sorted(edges)
    return [[b for b in others if overlaps(b, a, z)] for a, z in zip(cuts, cuts[1:], strict=False)]


def _slices_left(pool: Pool, needs: Needs, active: Sequence[HeldBooking]) -> int:
    """Slices the new booking can have once every active booking has its seats."""
    mine = {s.slice_id for s in pool.slices if can_use(needs, s)}
    if not active:
        return len(mine)
    sets = [{s.slice_id for s in pool.slices if can_use(b.needs, s)} for b in active]
    groups: dict[tuple[bool, ...], int] = defaultdict(int)
    for s in pool.slices:
        key = tuple(s.slice_id in u for u in sets) + (s.slice_id in mine,)
        if any(key):
            groups[key] += 1
    flow = _Flow()
    for key, size in groups.items():
        name = "g" + "".join("1" if k else "0" for k in key)
        flow.add(name, "sink", size)
        for i, member in enumerate(key[:-1]):
            if member:
                flow.add(f"b{i}", name, size)
        if key[-1]:
            flow.add("new", name, size)
    for i, b in enumerate(active):
        flow.add("source", f"b{i}", b.seats * max(b.needs.gpu_count, 1))
    flow.push("source", "sink")  # the confirmed bookings first
    flow.add("source", "new", len(mine))
    return int(flow.push("source", "sink"))


def _cpu_fit(pool: Pool, needs: Needs, active_sets: list[list[HeldBooking]]) -> int:
    """The most CPU-only seats the nodes hold in the tightest piece of the window."""
    cpus = sum(n.cpus for n in pool.nodes if n.available)
    memory = sum(n.memory_mb for n in pool.nodes if n.available)
    most = UNLIMITED
    for active in active_sets:
        free_cpus = cpus - sum(b.seats * b.needs.cpus for b in active)
        free_memory = memory - sum(b.seats * b.needs.memory_mb for b in active)
        if needs.cpus > 0:
            most = min(most, int(max(free_cpus, 0) // needs.cpus))
        if needs.memory_mb > 0:
            most = min(most, int(max(free_memory, 0) // needs.memory_mb))
    return most


def booking_fit(
    pool: Pool,
    needs: Needs,
    seats: int,
    starts_at: datetime,
    ends_at: datetime,
    others: Sequence[HeldBooking] = (),
) -> BookingFit:
    """Whether ``seats`` desktops of ``needs`` fit in the window next to ``others``."""
    near = [b for b in others if overlaps(b, starts_at, ends_at)]
    pieces = _pieces(starts_at, ends_at, near)
    if needs.gpu_count == 0:
        capacity = _cpu_fit(pool, needs, [[]])
        most = _cpu_fit(pool, needs, pieces)
        code = FITS if most >= seats else NO_NODE_ROOM
        if code != FITS and capacity >= seats:
            code = TAKEN_BY_BOOKINGS
        blocking = tuple(dict.fromkeys(b.label for b in near)) if code == TAKEN_BY_BOOKINGS else ()
        return BookingFit(most >= seats, seats, min(most, seats), capacity, code, blocking)
    per_seat = needs.gpu_count
    fitting = _slices_left(pool, needs, [])
    capacity = fitting // per_seat
    gpu_near = [b for b in near if b.needs.gpu_count > 0]
    slices = min(
        _slices_left(pool, needs, [b for b in active if b.needs.gpu_count > 0]) for active in pieces
    )
    most = slices // per_seat
    if most >= seats:
        return BookingFit(True, seats, seats, capacity, FITS, slices=fitting)
    if fitting == 0:
        return BookingFit(False, seats, 0, 0, NO_FITTING_SLICES)
    if capacity < seats and most == capacity:
        return BookingFit(
            False, seats, most, capacity, POOL_TOO_SMALL, (), fitting, seats * per_seat
        )
    blocking = tuple(
        dict.fromkeys(
            b.label
            for b in gpu_near
            if any(can_use(b.needs, s) and can_use(needs, s) for s in pool.slices)
        )
    )
    return BookingFit(False, seats, most, capacity, TAKEN_BY_BOOKINGS, blocking, fitting)


def booking_alternatives(
    pool: Pool,
    needs: Needs,
    seats: int,
    starts_at: datetime,
    ends_at: datetime,
    others: Sequence[HeldBooking] = (),
    *,
    windows: Sequence[tuple[datetime, datetime]] = (),
    profiles: Sequence[Needs] = (),
) -> list[Alternative]:
    """The nearest bookings that fit instead: the most seats that fit, the first of ``windows``
    (nearest to the asked start first) where every seat fits, the first of ``profiles`` that
    fits then. Empty when none does."""
    found: list[Alternative] = []
    asked = booking_fit(pool, needs, seats, starts_at, ends_at, others)
    if 0 < asked.most_seats < seats:
        found.append(
            Alternative(
                ALTERNATIVE_SEATS,
                asked.most_seats,
                starts_at,
                ends_at,
                needs.profile_id,
                needs.name,
            )
        )
    for a, z in sorted(windows, key=lambda w: (abs(w[0] - starts_at), w[0])):
        if (a, z) != (starts_at, ends_at) and booking_fit(pool, needs, seats, a, z, others).fits:
            found.append(Alternative(ALTERNATIVE_TIME, seats, a, z, needs.profile_id, needs.name))
            break
    for other in profiles:
        if other.profile_id == needs.profile_id:
            continue
        if booking_fit(pool, other, seats, starts_at, ends_at, others).fits:
            found.append(
                Alternative(
                    ALTERNATIVE_PROFILE, seats, starts_at, ends_at, other.profile_id, other.name
                )
            )
            break
    return found
