"""The internal price list as plain data: which line prices a use, and what it costs.

Pure Python (no Django), so that the rules are tested by example without a database.
``scheduling.services.accounting`` turns ``PriceRule`` rows into :class:`PriceLine`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal

GPU_HOUR = "gpu_hour"
CU_HOUR = "cu_hour"
HOURS_PLACES = Decimal("0.000001")
MONEY_PLACES = Decimal("0.01")
MICROSECONDS_PER_HOUR = Decimal(3_600_000_000)


@dataclass(frozen=True)
class PriceLine:
    """One price rule: blank ``slice_kind`` or ``profile`` means any; ``valid_until`` is
    inclusive, None for open."""

    slice_kind: str
    profile: str
    unit: str
    price: Decimal
    currency: str
    valid_from: date
    valid_until: date | None = None
    rule_id: int | None = None  # the PriceRule row, where there is one

    @property
    def key(self) -> tuple[str, str]:
        return (self.slice_kind, self.profile)

    def valid_on(self, day: date) -> bool:
        return self.valid_from <= day and (self.valid_until is None or day <= self.valid_until)

    def specificity(self) -> int:
        """A profile and a kind beat a profile, which beats a kind, which beats any."""
        return (2 if self.profile else 0) + (1 if self.slice_kind else 0)


def overlaps(first: date, until: date | None, other_first: date, other_until: date | None) -> bool:
    """Whether two inclusive date ranges (None: open) share a day."""
    starts_before_other_ends = other_until is None or first <= other_until
    other_starts_before_end = until is None or other_first <= until
    return starts_before_other_ends and other_starts_before_end


def shared_days(
    first: date, until: date | None, other_first: date, other_until: date
) -> tuple[date, date] | None:
    """The days an inclusive range (None: open) shares with a closed one, or None."""
    start = max(first, other_first)
    end = other_until if until is None else min(until, other_until)
    return (start, end) if start <= end else None


def line_for(
    lines: Iterable[PriceLine], slice_kind: str, profile: str, day: date
) -> PriceLine | None:
    """The most specific line valid on ``day`` that matches the kind and the profile.

    Lines of one key never overlap (the check service refuses it), so at most one line of
    each specificity matches.
    """
    matching = [
        line
        for line in lines
        if line.valid_on(day)
        and line.slice_kind in ("", slice_kind)
        and line.profile in ("", profile)
    ]
    return max(matching, key=PriceLine.specificity, default=None)


def hours_between(start: datetime, end: datetime) -> Decimal:
    """Exact hours (to the microsecond) from ``start`` to ``end``, never negative."""
    microseconds = max(0, (end - start) // timedelta(microseconds=1))
    return Decimal(microseconds) / MICROSECONDS_PER_HOUR


def held_hours(part: float, hours: Decimal) -> Decimal:
    """``part`` (GPUs or compute units held) times ``hours``, to six places."""
    return (Decimal(str(part)) * hours).quantize(HOURS_PLACES, rounding=ROUND_HALF_UP)


def idle_hours(gpu_hours: Decimal, utilisation_pct: float | None) -> Decimal:
    """The allocated GPU-hours the reading says were idle; 0 when there is no reading."""
    if utilisation_pct is None:
        return Decimal(0)
    busy = min(100.0, max(0.0, utilisation_pct))
    idle = Decimal(str(100.0 - busy)) / 100
    return (gpu_hours * idle).quantize(HOURS_PLACES, rounding=ROUND_HALF_UP)


def cost(line: PriceLine | None, gpu_hours: Decimal, cu_hours: Decimal) -> Decimal:
    """What a use costs under ``line``, to the cent; 0 when no line prices it."""
    if line is None:
        return Decimal(0)
    amount = gpu_hours if line.unit == GPU_HOUR else cu_hours
    return (amount * line.price).quantize(MONEY_PLACES, rounding=ROUND_HALF_UP)
