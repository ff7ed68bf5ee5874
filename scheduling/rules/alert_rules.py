"""The alerts' decision, as a pure function of plain data (no Django, no I/O): :func:`step`.

One rule watches one subject (a GPU, a node, a rack or the pool). Each evaluation feeds the
subject's latest value and the time to :func:`step`, with what was remembered from the last
one (:class:`Track`), and gets back what to remember and what happened:

- no alert open: a value at or above the raise level (the warning level, or the critical one
  where there is no warning) starts the "sustained" clock; a value below it stops the clock.
  Once the clock has run ``sustained_s``, an alert is raised, critical if the value is at the
  critical level then. So a value hovering at the threshold raises one alert, not a flood,
  and a value that keeps dipping below it never raises one with a sustained rule;
- an alert open: a value at or above the critical level escalates a warning (once: the level
  never goes down); only a value below the recovery level resolves it. A rule without a
  recovery level is resolved by a person only;
- a person resolved the alert while the value was still high: no new alert until the value
  has gone below the recovery level (the warning level without one), so that resolving by
  hand is not answered by the same alert a minute later.

A reading that is missing (``None``: the GPU does not report it) changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from enum import StrEnum

WARNING = "warning"
CRITICAL = "critical"


class Event(StrEnum):
    NONE = "none"
    RAISED = "raised"
    ESCALATED = "escalated"
    RESOLVED = "resolved"


@dataclass(frozen=True)
class Levels:
    """A rule's thresholds: higher is worse. At least one of warning and critical is set."""

    warning: float | None
    critical: float | None
    recovery: float | None  # None: a person resolves it
    sustained_s: float = 0.0

    @property
    def raise_at(self) -> float:
        level = self.warning if self.warning is not None else self.critical
        assert level is not None, "a rule has a warning or a critical level"
        return level

    def level_of(self, value: float) -> str:
        """The level of a value at or above the raise level."""
        if self.critical is not None and value >= self.critical:
            return CRITICAL
        return WARNING

    def recovered(self, value: float) -> bool:
        return self.recovery is not None and value < self.recovery

    def rearms(self, value: float) -> bool:
        """Low enough that a new alert may follow one resolved by a person."""
        return value < (self.recovery if self.recovery is not None else self.raise_at)


@dataclass(frozen=True)
class Track:
    """What is remembered of one rule and subject between evaluations."""

    level: str | None = None  # the open alert's level; None: no alert open
    breach_since: datetime | None = None  # when the value reached the raise level
    armed: bool = True  # False after a person resolved it while the value was high


@dataclass(frozen=True)
class Outcome:
    track: Track
    event: Event = Event.NONE

    @property
    def level(self) -> str | None:
        return self.track.level


def step(track: Track, value: float | None, levels: Levels, now: datetime) -> Outcome:
    """The next state of one rule and subject, given its latest value at ``now``."""
    if value is None:
        return Outcome(track)
    if track.level is not None:
        if levels.recovered(value):
            return Outcome(Track(), Event.RESOLVED)
        if track.level == WARNING and levels.level_of(value) == CRITICAL:
            return Outcome(replace(track, level=CRITICAL), Event.ESCALATED)
        return Outcome(track)
    if not track.armed:
        return Outcome(Track() if levels.rearms(value) else track)
    if value < levels.raise_at:
        return Outcome(replace(track, breach_since=None))
    since = track.breach_since or now
    if now - since >= timedelta(seconds=levels.sustained_s):
        return Outcome(Track(level=levels.level_of(value), breach_since=since), Event.RAISED)
    return Outcome(replace(track, breach_since=since))


def resolved_by_hand(track: Track) -> Track:
    """The track after a person resolved its alert: quiet until the value comes down."""
    return Track(armed=False)
