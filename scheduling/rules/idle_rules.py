"""The idle policy's decision, as a pure function of plain data (no Django, no I/O): :func:`step`.

Each minute the service feeds one running (or suspended) session's activity, its policy and
the time to :func:`step`, with the verdict it gave last time (:class:`Track`), and gets the
next verdict back (docs/lifecycle.md):

- a session is *quiet* from the latest of: its start, its last input event, its last sample
  with a busy GPU (at or above ``gpu_idle_pct``) or a busy CPU (at or above
  ``cpu_idle_pct``, when the policy sets one). A viewer connected without typing or moving
  the mouse is not activity. With ``gpu_needs_viewer``, a busy GPU counts only while
  someone is connected, except for a thesis session: a thesis training run with a busy GPU
  and nobody connected is never idle;
- quiet for ``idle_after``: IDLE; for ``warn_after``: WARNED (the person is told); still
  quiet ``suspend_after`` after the warning: SUSPENDED; suspended for ``end_after``: ENDED.
  Any activity after a warning resets it to ACTIVE;
- never idle: a booked class's session inside its booking window, a session whose policy is
  off, and a session whose agent reports no utilisation (no sample in the last
  :data:`SAMPLES_FRESH`): without the GPU's figures nobody can say it is idle;
- busy now, whatever its figures, input or viewers: a session whose MIG instance runs a CUDA
  process (``Context.cuda_running``, from the agent's latest per-slice report). NVML has no
  utilisation per MIG instance, so a GPU-bound run there could otherwise look idle.

``since`` is when the verdict changed: the time of the step that changed it, or for a
reset to ACTIVE the time of the activity that reset it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

# Without a utilisation sample this recent, the session is not judged (ACTIVE).
SAMPLES_FRESH = timedelta(minutes=5)


class Idle(StrEnum):
    """The verdicts; the same values as ``scheduling.choices.IdleState``."""

    ACTIVE = "active"
    IDLE = "idle"
    WARNED = "warned"
    SUSPENDED = "suspended"
    ENDED = "ended"


@dataclass(frozen=True)
class Sample:
    """One utilisation report of the session's own slice and container (None: not known)."""

    at: datetime
    gpu_pct: float | None = None
    cpu_pct: float | None = None


@dataclass(frozen=True)
class Activity:
    started_at: datetime  # when the desktop started running: nothing is quiet before it
    last_input_at: datetime | None = None
    viewers: int = 0  # connected now
    samples: tuple[Sample, ...] = ()


@dataclass(frozen=True)
class Policy:
    """Defaults drawn from campus practice: no input and the GPU under 5% for 30 minutes →
    warn; 15 minutes later → suspend; 24 hours suspended → end."""

    enabled: bool = True
    idle_after: timedelta = timedelta(minutes=10)
    warn_after: timedelta = timedelta(minutes=30)
    suspend_after: timedelta = timedelta(minutes=15)
    end_after: timedelta = timedelta(hours=24)
    gpu_idle_pct: float = 5.0
    cpu_idle_pct: float | None = 50.0
    gpu_needs_viewer: bool = False


@dataclass(frozen=True)
class Context:
    thesis: bool = False  # its purpose is a thesis
    in_class: bool = False  # a booked class's session, inside the booking's window
    cuda_running: bool = False  # a CUDA process runs on its MIG instance now


@dataclass(frozen=True)
class Track:
    state: Idle = Idle.ACTIVE
    since: datetime | None = None


def _busy(sample: Sample, activity: Activity, policy: Policy, context: Context) -> bool:
    gpu_counts = context.thesis or not policy.gpu_needs_viewer or activity.viewers > 0
    if gpu_counts and sample.gpu_pct is not None and sample.gpu_pct >= policy.gpu_idle_pct:
        return True
    return (
        policy.cpu_idle_pct is not None
        and sample.cpu_pct is not None
        and sample.cpu_pct >= policy.cpu_idle_pct
    )


def quiet_since(activity: Activity, policy: Policy, context: Context) -> datetime:
    """The latest sign of use: the start, the last input, the last busy sample."""
    moments = [activity.started_at]
    if activity.last_input_at is not None:
        moments.append(activity.last_input_at)
    moments.extend(s.at for s in activity.samples if _busy(s, activity, policy, context))
    return max(moments)


def _keep(track: Track, state: Idle, now: datetime) -> Track:
    """``state``, with the time it began: kept if it was already so (an ACTIVE session never
    judged otherwise keeps no time), else ``now``."""
    if track.state == state:
        return track
    return Track(state, now)


def step(
    track: Track, activity: Activity, policy: Policy, context: Context, now: datetime
) -> Track:
    """The next verdict for one session (see the module's docstring)."""
    if track.state == Idle.ENDED:
        return track
    if track.state == Idle.SUSPENDED:
        since = track.since or now
        if now - since >= policy.end_after:
            return Track(Idle.ENDED, now)
        return Track(Idle.SUSPENDED, since)
    fed = any(s.at >= now - SAMPLES_FRESH for s in activity.samples)
    if context.in_class or context.cuda_running or not policy.enabled or not fed:
        return _keep(track, Idle.ACTIVE, now)
    last_use = quiet_since(activity, policy, context)
    if track.state == Idle.WARNED and track.since is not None and last_use <= track.since:
        if now - track.since >= policy.suspend_after:
            return Track(Idle.SUSPENDED, now)
        return track
    quiet = now - last_use
    if quiet >= policy.warn_after:
        return Track(Idle.WARNED, now)
    if quiet >= policy.idle_after:
        return _keep(track, Idle.IDLE, now)
    if track.state != Idle.ACTIVE:
        return Track(Idle.ACTIVE, last_use)  # reset by the activity at ``last_use``
    return _keep(track, Idle.ACTIVE, now)
