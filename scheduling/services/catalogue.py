"""What each desktop profile offers a person now: its resources and the wait it has.

The wait is an estimate for the request form, not a promise: a fitting slice free now on a
healthy node means "now"; no healthy node that takes new desktops means the pool is closed
(``closed``: no wait is given); otherwise the earliest times fitting slices free up (a running
session's start plus its profile's time limit, a warm desktop's class end), one per request
already waiting for that kind of slice.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta

from ..choices import WAITING_STATES, SliceKind
from ..models import Allocation, DesktopProfile, Node, Session, Slice
from ..presenters import pool_closed_words
from .feasibility import unavailable_words


@dataclass(frozen=True)
class ProfileOffer:
    """A profile as the request form shows it, with its wait right now."""

    profile: DesktopProfile
    kinds: tuple[str, ...]  # SliceKind labels, in the reader's language
    gpu_models: tuple[str, ...]  # empty: any model
    starts_now: bool
    wait_minutes: int | None  # None: no healthy node has a slice that fits
    # Why no healthy node could ever run it (reader's language); "" when one could.
    unavailable: str = ""
    # Why nothing starts now when no node takes new desktops (the pool is closed), else "".
    closed: str = ""


def profile_offers(now: datetime) -> list[ProfileOffer]:
    """Every active profile with what it gives and the wait it has now."""
    healthy = [
        n.pk for n in Node.objects.filter(cordoned=False, draining_since=None) if n.is_healthy(now)
    ]
    slices = list(
        Slice.objects.filter(present=True, gpu__present=True, gpu__node__in=healthy)
        .select_related("gpu")
        .order_by("pk")
    )
    frees_at = _frees_at(now)
    waiting = list(
        Session.objects.filter(state__in=WAITING_STATES).values_list(
            "profile__allowed_kinds", flat=True
        )
    )
    labels = dict(SliceKind.choices)
    offers = []
    profiles = list(DesktopProfile.objects.filter(active=True))
    never = unavailable_words(profiles, now)
    closed = "" if healthy else pool_closed_words()
    for profile in profiles:
        fitting = [s for s in slices if fits(profile, s)]
        free = [s for s in fitting if s.pk not in frees_at]
        if profile.gpu_count == 0:
            starts_now = bool(healthy)
        else:
            starts_now = _gpus_per_node(free) >= profile.gpu_count
        starts_now = starts_now and profile.pk not in never
        wait: int | None = 0 if starts_now else None
        if not starts_now and fitting and profile.pk not in never:
            ahead = sum(1 for kinds in waiting if set(kinds or ()) & set(profile.allowed_kinds))
            wait = _estimate(
                sorted(frees_at[s.pk] for s in fitting if s.pk in frees_at), ahead, profile, now
            )
        offers.append(
            ProfileOffer(
                profile=profile,
                kinds=tuple(str(labels.get(k, k)) for k in profile.allowed_kinds),
                gpu_models=tuple(profile.gpu_models or ()),
                starts_now=starts_now,
                wait_minutes=wait,
                unavailable=never.get(profile.pk, ""),
                closed=closed,
            )
        )
    return offers


def fits(profile: DesktopProfile, slice_: Slice) -> bool:
    """Kind, memory, GPU model (substrings; none = any) and compute units per slice."""
    gpu = slice_.gpu
    wanted = [m.lower() for m in profile.gpu_models or []]
    return (
        slice_.kind in profile.allowed_kinds
        and slice_.memory_mb >= profile.gpu_memory_min_mb
        and (not wanted or any(w in gpu.model.lower() for w in wanted))
        and gpu.compute_units * slice_.milli / 1000 >= profile.compute_min
    )


def _gpus_per_node(free: list[Slice]) -> int:
    """The most distinct GPUs with a free fitting slice on any one node."""
    gpus: dict[int, set[int]] = defaultdict(set)
    for s in free:
        gpus[s.gpu.node_id].add(s.gpu_id)
    return max((len(g) for g in gpus.values()), default=0)


def _frees_at(now: datetime) -> dict[int, datetime]:
    """Held slices and when each is expected back."""
    out: dict[int, datetime] = {}
    holds = Allocation.objects.filter(released_at=None, slice__isnull=False).select_related(
        "session__profile", "warm__booking"
    )
    for hold in holds:
        assert hold.slice_id is not None
        if hold.session is not None:
            since = hold.session.started_at or hold.session.placed_at or now
            limit = timedelta(minutes=hold.session.profile.max_duration_minutes)
            out[hold.slice_id] = max(now, since + limit)
        elif hold.warm is not None:
            out[hold.slice_id] = max(now, hold.warm.booking.ends_at)
        else:
            out[hold.slice_id] = now
    return out


def _estimate(
    times: list[datetime], ahead: int, profile: DesktopProfile, now: datetime
) -> int | None:
    """Minutes until the slice the request would get frees: the queue ahead takes the first
    ones, each served for its time limit again once the slices come round."""
    if not times:
        return None
    rounds, index = divmod(ahead, len(times))
    start = times[index] + rounds * timedelta(minutes=profile.max_duration_minutes)
    return max(1, math.ceil((start - now).total_seconds() / 60))
