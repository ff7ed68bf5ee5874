"""Where a person's home folder lives: for the session page, and for placement (issue 13,
issue 27; docs/deploy.md "Homes on several nodes", docs/scheduling.md "Homes").

A node whose agent keeps homes under a root every node shares (``DESKPOOL_HOME_ROOT``, told
at registration: ``Node.home_root_shared``) gives the student the same home on any node
sharing it; any other node keeps the home to itself, so a desktop started elsewhere (after a
requeue) starts with a different, empty one.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from django.db.models import Count, OuterRef, QuerySet, Subquery

from ..choices import ON_NODE_STATES, TERMINAL_STATES, SessionState
from ..models import Booking, Node, Session, UsageRecord, WarmDesktop


@dataclass(frozen=True)
class HomePlace:
    node: str
    shared: bool


def home_place(session: Session) -> HomePlace | None:
    """The node holding the session's home and whether other nodes share it; None before
    the session is placed and after it ended."""
    node = session.node
    if node is None or session.state in TERMINAL_STATES:
        return None
    return HomePlace(node=node.hostname, shared=node.home_root_shared)


def _runs(**match: object) -> QuerySet[UsageRecord]:
    """The runs (``UsageRecord``: a desktop that reached RUNNING) matching ``match``, latest
    first."""
    return UsageRecord.objects.filter(**match).order_by("-started_at", "-pk")


def _last_run(field: str = "node_hostname", **match: object) -> Subquery:
    """A field (the node's name) of the latest run matching ``match``."""
    return Subquery(_runs(**match).values(field)[:1])


def last_run_node(user: object) -> Node | None:
    """The node where the person's latest desktop ran (2. of :func:`home_nodes`), whether or
    not it shares homes; None when they never ran one, or its node is gone (or the run was
    on several nodes). The Files page's home when no desktop of theirs runs."""
    host = _runs(user=user).values_list("node_hostname", flat=True).first()
    return Node.objects.filter(hostname=host).first() if host else None


def home_nodes(waiting: Sequence[Session]) -> dict[int, tuple[int, ...]]:
    """For each waiting session, the nodes that keep its person's home to themselves, most
    preferred first; sessions with none are left out. In three queries, however long the
    queue. The nodes, each kept only while it does not share homes (a run on a node that
    shares them leaves nothing behind that another sharing node lacks):

    1. where this session's desktop last ran (a requeued, preempted or resumed desktop comes
       back to its files);
    2. where the person's latest desktop ran, whichever session it was;
    3. where each of the person's suspended desktops last ran, latest first (their homes
       wait there for the resume).

    "Ran" is a run's usage record (``UsageRecord``, opened at RUNNING): a placement whose
    desktop never started wrote no home.
    """
    if not waiting:
        return {}
    local = dict(Node.objects.filter(home_root_shared=False).values_list("hostname", "pk"))
    if not local:
        return {}
    users = {s.user_id for s in waiting}
    rows = (
        Session.objects.filter(pk__in=[s.pk for s in waiting])
        .annotate(
            own=_last_run(session=OuterRef("pk")),
            person=_last_run(user=OuterRef("user_id")),
        )
        .values_list("pk", "user_id", "own", "person")
    )
    suspended: dict[int, list[str]] = defaultdict(list)
    for user_id, host in (
        Session.objects.filter(user_id__in=users, state=SessionState.SUSPENDED)
        .annotate(
            host=_last_run(session=OuterRef("pk")),
            at=_last_run("started_at", session=OuterRef("pk")),
        )
        .order_by("-at", "-pk")
        .values_list("user_id", "host")
    ):
        suspended[user_id].append(host)
    out = {}
    for pk, user_id, own, person in rows:
        nodes = _local_nodes((own, person, *suspended[user_id]), local)
        if nodes:
            out[pk] = nodes
    return out


def _local_nodes(hosts: Iterable[str | None], local: dict[str, int]) -> tuple[int, ...]:
    """The ids of the hosts that keep homes to themselves, in order, each once (a run on
    several nodes, whose record names them all, matches none)."""
    return tuple(dict.fromkeys(local[h] for h in hosts if h and h in local))


def booking_home_nodes(bookings: Sequence[Booking]) -> dict[int, tuple[tuple[int, int], ...]]:
    """For each booking, the nodes that keep homes of its course's enrolled students to
    themselves, each with how many of those homes still want a seat there, most first (ties:
    node id); bookings with none are left out. A student's home is where their latest
    desktop ran (2. of :func:`home_nodes`), on a node that does not share homes. A node's
    count is lowered by the booking's seats already there: its warm desktops and its sessions
    holding capacity. Four queries, however many bookings and students. The engine holds
    the bookings' seats on these nodes first (``engine.Booking.home_nodes``), so the warm
    desktops start where the students' homes are."""
    if not bookings:
        return {}
    local = dict(Node.objects.filter(home_root_shared=False).values_list("hostname", "pk"))
    if not local:
        return {}
    ids = [b.pk for b in bookings]
    counts: dict[int, Counter[int]] = defaultdict(Counter)
    # One row per (booking, enrolled student): the host of the student's latest run.
    for booking_id, host in (
        Booking.objects.filter(pk__in=ids, course__students__isnull=False)
        .annotate(host=_last_run(user=OuterRef("course__students")))
        .values_list("pk", "host")
    ):
        if host in local:
            counts[booking_id][local[host]] += 1
    seated = (
        WarmDesktop.objects.filter(booking_id__in=ids).values_list("booking_id", "node_id"),
        Session.objects.filter(
            booking_id__in=ids, state__in=ON_NODE_STATES, node__isnull=False
        ).values_list("booking_id", "node_id"),
    )
    for rows in seated:
        for booking_id, node_id, n in rows.annotate(n=Count("pk")).values_list(
            "booking_id", "node_id", "n"
        ):
            if booking_id in counts:
                counts[booking_id][node_id] -= n
    return {
        booking_id: tuple(
            sorted(((n, k) for n, k in nodes.items() if k > 0), key=lambda nk: (-nk[1], nk[0]))
        )
        for booking_id, nodes in counts.items()
        if any(k > 0 for k in nodes.values())
    }
