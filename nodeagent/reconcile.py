"""Converge this node's desktop containers to the portal's desired sessions.

Level-triggered: every :meth:`Reconciler.step` looks at the whole picture (desired
sessions, containers found by label) and fixes the difference, so a missed message,
an agent restart or a killed container all heal on the next step. Bookkeeping is per
placement (the desired session's ``placement``): a session requeued and placed here again
is a new desktop, and a container of its earlier placement is replaced, never adopted.
Starts and stops run in thread pools: ten desktops start in parallel and a slow start
never holds up a stop. Reports go through the outbox (:mod:`nodeagent.outbox`), which
keeps those that cannot reach the portal and sends them, in order, later.

Warm pool: the portal's ``warm`` list is kept started by :mod:`nodeagent.warm_desktops`. A
desired session with a ``warm_key`` claims that running desktop here instead of starting
one (falling back to a fresh start when the claim fails).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field

from nodeagent.outbox import (
    CLAIM_STARTING_LINGER_S,
    ReportOutbox,
    SendOutcome,
    SessionReporter,
    failed_report,
    report,
    running_report,
)
from nodeagent.protocol import DesiredSession, DesiredWarm, ReportedState, SessionReport
from nodeagent.runtime.base import DesktopRuntime, ManagedContainer, StartFailed
from nodeagent.warm_desktops import WarmDesktops, WarmSteps

logger = logging.getLogger(__name__)


@dataclass
class StepSummary:
    """What one step set in motion (for logs and tests)."""

    starting: list[int] = field(default_factory=list)
    stopping: list[int] = field(default_factory=list)
    lost: list[int] = field(default_factory=list)
    adopted: list[int] = field(default_factory=list)
    replaced: list[int] = field(default_factory=list)  # container of an earlier placement
    claiming: list[int] = field(default_factory=list)  # sessions claiming a warm desktop
    warm: WarmSteps = field(default_factory=WarmSteps)

    def is_quiet(self) -> bool:
        return self.warm.is_quiet() and not (
            self.starting
            or self.stopping
            or self.lost
            or self.adopted
            or self.replaced
            or self.claiming
        )


# What is left of an action once its desktop started: waiting for the portal's answer.
FollowUp = Callable[[], None]


def _logged(session_id: int, step: Callable[[], FollowUp | None]) -> FollowUp | None:
    try:
        return step()
    except Exception:
        # Level-triggered: the next step sees the same difference and tries again.
        logger.exception("session %s: reconcile action failed", session_id)
        return None


def is_earlier_placement(container: ManagedContainer, session: DesiredSession) -> bool:
    """True when the container was made for another placement of this session.

    A container without the label (made by an older agent, or for a portal that sends no
    placement) cannot tell and is adopted as before.
    """
    wanted = session.placement
    return bool(wanted and container.placement and container.placement != wanted)


class Reconciler:
    """Owns the desktops of one node for the lifetime of one agent process."""

    def __init__(
        self,
        runtime: DesktopRuntime,
        reporter: SessionReporter,
        *,
        start_workers: int = 10,
        stop_workers: int = 4,
        warm_workers: int = 2,
        on_running: Callable[[], None] | None = None,
    ) -> None:
        self._runtime = runtime
        # Called (on a worker thread) when a desktop was announced RUNNING: the gateway
        # learns its endpoints at once, not at the next step.
        self._on_running = on_running
        self._outbox = ReportOutbox(reporter)
        self._warm = WarmDesktops(runtime, self._outbox, workers=warm_workers)
        self._starts = ThreadPoolExecutor(start_workers, thread_name_prefix="desktop-start")
        self._stops = ThreadPoolExecutor(stop_workers, thread_name_prefix="desktop-stop")
        # Waiting for the portal's answers to RUNNING reports (one batch answers many).
        self._reports = ThreadPoolExecutor(start_workers, thread_name_prefix="desktop-report")
        self._lock = threading.Lock()
        self._in_flight: dict[int, Future[None]] = {}
        # Placements this process will not start again while they stay desired (FAILED,
        # LOST, ...): session id -> (placement, state). A new placement starts afresh.
        self._finished: dict[int, tuple[str, ReportedState]] = {}
        # Placements reported RUNNING by this process (started here or adopted): id -> placement.
        self._announced: dict[int, str] = {}
        self._desired: dict[int, DesiredSession] = {}
        # The desktops of those placements, where they answer: id -> (placement, container).
        self._running: dict[int, tuple[str, ManagedContainer]] = {}

    # -- the step ------------------------------------------------------------------------

    def step(
        self, desired: Sequence[DesiredSession], warm: Sequence[DesiredWarm] = ()
    ) -> StepSummary:
        """Compare desired sessions (and warm desktops) with the containers found and act."""
        self._outbox.flush(wait=False)  # held-back reports; not behind a send in flight
        summary = StepSummary()
        wanted = {session.session_id: session for session in desired}
        # In-flight first, then the listing: an action that ends in between is then
        # visible in the listing, so it can never be started twice.
        with self._lock:
            self._desired = wanted
            busy = set(self._in_flight)
        warm_busy = self._warm.in_flight()
        # One picture of the node for both look-ups (a runtime that can: one engine listing).
        with getattr(self._runtime, "one_listing", contextlib.nullcontext)():
            warm_found = {w.key: w for w in self._runtime.list_warm()}
            containers = {c.session_id: c for c in self._runtime.list_managed()}
        for session_id, container in containers.items():
            if session_id in busy:
                continue
            if session_id not in wanted:
                summary.stopping.append(session_id)
                self._submit_stop(session_id, container.placement, report_ended=True)
                continue
            session = wanted[session_id]
            placement = session.placement
            if is_earlier_placement(container, session):
                # Requeued and placed here again before we saw it leave: that desktop has
                # the old password and slice. Nothing to report about the old one (the
                # portal moved on); replace it with the new placement's desktop.
                summary.replaced.append(session_id)
                self._submit(self._starts, session_id, lambda s=session: self._replace(s))  # type: ignore[misc]
            elif (
                not container.running
                and container.status == "created"
                and not self._is_announced(session_id, placement)
                and self._finished_state(session_id, placement) is None
            ):
                # Created, never started: an agent died between create and start. Start
                # afresh (the start removes the leftover); it never ran, so it is not LOST.
                summary.starting.append(session_id)
                self._submit(self._starts, session_id, lambda s=session: self._start(s))  # type: ignore[misc]
            elif not container.running:
                if self._finished_state(session_id, placement) != "LOST":
                    summary.lost.append(session_id)
                    self._report_lost(session_id, placement, container.exit_reason())
                # Keep the home volume, drop the dead container.
                self._submit_stop(session_id, placement, report_ended=False)
            elif not self._is_announced(session_id, placement):
                summary.adopted.append(session_id)
                self._adopt(container, placement)
        for session_id, session in wanted.items():
            placement = session.placement
            if (
                session_id in containers
                or session_id in busy
                or self._finished_state(session_id, placement) is not None
            ):
                continue
            if self._is_announced(session_id, placement):
                summary.lost.append(session_id)
                self._report_lost(session_id, placement, "desktop container disappeared")
                continue
            key = session.warm_key
            found = warm_found.get(key) if key else None
            if key and key in warm_busy:
                continue  # its warm start (or stop) is still in flight: look again next step
            if found is not None and found.running and found.claimed_by is None:
                summary.claiming.append(session_id)
                self._submit(
                    self._starts,
                    session_id,
                    lambda s=session, k=key: self._start(s, claim=k),  # type: ignore[misc]
                )
                continue
            summary.starting.append(session_id)
            self._submit(self._starts, session_id, lambda s=session: self._start(s))  # type: ignore[misc]
        claiming = {s.warm_key: s.session_id for s in wanted.values() if s.warm_key}
        summary.warm = self._warm.step(warm, warm_found, warm_busy, claiming, busy)
        self._forget_undesired(wanted, containers)
        return summary

    def _forget_undesired(
        self, wanted: dict[int, DesiredSession], containers: dict[int, ManagedContainer]
    ) -> None:
        with self._lock:
            for session_id in list(self._finished):
                if session_id not in wanted and session_id not in containers:
                    del self._finished[session_id]
            keep = set(wanted) | set(self._in_flight)
            for session_id in list(self._announced):
                if session_id not in keep:
                    del self._announced[session_id]
            for session_id in list(self._running):
                if session_id not in self._announced:
                    del self._running[session_id]

    def _finished_state(self, session_id: int, placement: str) -> ReportedState | None:
        finished = self._finished.get(session_id)
        return finished[1] if finished is not None and finished[0] == placement else None

    def _finish(self, session_id: int, placement: str, state: ReportedState) -> None:
        self._finished[session_id] = (placement, state)

    def _is_announced(self, session_id: int, placement: str) -> bool:
        return self._announced.get(session_id) == placement

    def _announce(self, session_id: int, placement: str, container: ManagedContainer) -> None:
        with self._lock:
            self._announced[session_id] = placement
            self._running[session_id] = (placement, container)
        if self._on_running is not None:
            try:
                self._on_running()
            except Exception:
                logger.exception("session %s: telling the desktop's endpoints failed", session_id)

    # -- actions -------------------------------------------------------------------------

    def _start(self, session: DesiredSession, *, claim: str = "") -> FollowUp | None:
        """Start the desktop; what is left, waiting for the portal's answer to its RUNNING
        report, is returned to run on a reporting thread, so that this start worker goes
        on to the next desktop. (A class start gives a node fifty at once; waiting here
        started them ten at a time, one round trip to a busy portal apart.)"""
        session_id = session.session_id
        placement = session.placement
        # Not waited for: it goes out with the RUNNING (or FAILED) report, in one batch, and
        # the portal's answer to that one says whether the desktop may stay.
        linger = CLAIM_STARTING_LINGER_S if claim else None
        self._outbox.post(session_id, report("STARTING", placement), linger=linger)
        try:
            container = self._claim_or_start(session, claim)
        except StartFailed as error:
            logger.warning("session %s: start failed: %s", session_id, error)
            self._finish(session_id, placement, "FAILED")
            self._send(session_id, failed_report(error, placement))
            return None
        logger.info("session %s: desktop running on port %s", session_id, container.port)
        self._announce(session_id, placement, container)
        ticket = self._outbox.post(session_id, running_report(container, placement))

        def answered() -> None:
            if self._outbox.outcome(ticket) == "conflict":
                self._finish(session_id, placement, "ENDED")
                self._runtime.stop(session_id)

        return answered

    def _claim_or_start(self, session: DesiredSession, claim: str) -> ManagedContainer:
        if claim:
            try:
                return self._runtime.claim(claim, session)
            except StartFailed as error:
                # The runtime removed that warm desktop; the session still gets one.
                logger.warning(
                    "session %s: claiming warm desktop %s failed (%s); starting a new desktop",
                    session.session_id,
                    claim,
                    error,
                )
        return self._runtime.start(session)

    def _replace(self, session: DesiredSession) -> FollowUp | None:
        session_id = session.session_id
        logger.info(
            "session %s: desktop of an earlier placement found; replacing it for placement %s",
            session_id,
            session.placement,
        )
        self._runtime.stop(session_id)
        with self._lock:
            self._announced.pop(session_id, None)
        return self._start(session)

    def _adopt(self, container: ManagedContainer, placement: str) -> None:
        logger.info(
            "session %s: adopting running container %s",
            container.session_id,
            container.container_id[:12],
        )
        wait_ready = getattr(self._runtime, "wait_ready", None)
        if wait_ready is None:  # e.g. the simulated runtime: nothing to wait for
            self._announce(container.session_id, placement, container)
            if self._send(container.session_id, running_report(container, placement)) == (
                "conflict"
            ):
                self._submit_stop(container.session_id, placement, report_ended=False)
            return

        def adopt() -> None:
            # An agent killed mid-start leaves containers that run but may not answer yet:
            # RUNNING promises a VNC handshake, so check before saying so.
            try:
                ready = wait_ready(container)
            except StartFailed as error:
                session_id = container.session_id
                logger.warning("session %s: adopted desktop not ready: %s", session_id, error)
                self._finish(session_id, placement, "FAILED")
                self._runtime.stop(session_id)
                self._send(session_id, failed_report(error, placement))
                return
            self._announce(ready.session_id, placement, ready)
            if self._send(ready.session_id, running_report(ready, placement)) == "conflict":
                self._finish(ready.session_id, placement, "ENDED")
                self._runtime.stop(ready.session_id)

        self._submit(self._starts, container.session_id, adopt)

    def _report_lost(self, session_id: int, placement: str, reason: str) -> None:
        logger.warning("session %s: LOST: %s", session_id, reason)
        self._finish(session_id, placement, "LOST")
        with self._lock:
            self._announced.pop(session_id, None)
        self._send(session_id, report("LOST", placement, reason=reason))

    def _submit_stop(self, session_id: int, placement: str, *, report_ended: bool) -> None:
        def stop() -> None:
            self._runtime.stop(session_id)
            with self._lock:
                self._announced.pop(session_id, None)
            if report_ended:
                logger.info("session %s: desktop stopped", session_id)
                self._send(session_id, report("ENDED", placement))

        self._submit(self._stops, session_id, stop)

    def _submit(
        self, pool: ThreadPoolExecutor, session_id: int, task: Callable[[], FollowUp | None]
    ) -> None:
        """Run ``task`` on ``pool``. The session stays in flight until it is done, and, when
        it returns a follow-up (waiting for the portal's answer), until that is done too, on
        a reporting thread: the pool's worker is free as soon as ``task`` returns."""
        whole: Future[None] = Future()

        def finish() -> None:
            with self._lock:
                if self._in_flight.get(session_id) is whole:
                    del self._in_flight[session_id]
            whole.set_result(None)

        def run() -> None:
            then = _logged(session_id, task)
            if then is None:
                finish()
                return

            def follow() -> None:
                _logged(session_id, then)
                finish()

            try:
                self._reports.submit(follow)
            except RuntimeError:  # shutting down: nobody waits for the answer any more
                finish()

        with self._lock:
            self._in_flight[session_id] = whole
        pool.submit(run)

    def _send(self, session_id: int, body: SessionReport) -> SendOutcome:
        return self._outbox.send(session_id, body)

    def flush_reports(self) -> None:
        """Send reports held back while the portal was unreachable."""
        self._outbox.flush()

    # -- views for the heartbeat ---------------------------------------------------------

    def busy_devices(self, running_ids: Sequence[int]) -> list[str]:
        """GPU/MIG UUIDs held by running sessions, one entry per session slice."""
        with self._lock:
            return [
                device
                for session_id in running_ids
                if (session := self._desired.get(session_id)) is not None
                for device in session.gpu_devices
            ]

    def running_desktops(self) -> dict[int, ManagedContainer]:
        """The desktops reported RUNNING by this process and not stopped or lost since,
        with where they answer (a claimed warm desktop: the claimed container's ports)."""
        with self._lock:
            return {
                session_id: container
                for session_id, (placement, container) in self._running.items()
                if self._announced.get(session_id) == placement
            }

    def in_flight(self) -> set[int]:
        with self._lock:
            return set(self._in_flight)

    def warm_in_flight(self) -> set[str]:
        return self._warm.in_flight()

    def wait_idle(self, timeout_s: float = 60.0) -> bool:
        """Wait for the starts and stops in flight (tests, and a tidy shutdown)."""
        with self._lock:
            futures = list(self._in_flight.values())
        _, not_done = wait(futures + self._warm.futures(), timeout=timeout_s)
        return not not_done

    def close(self, *, wait_for_actions: bool = False) -> None:
        """Stop taking work. Desktops keep running: they outlive the agent."""
        self._starts.shutdown(wait=wait_for_actions, cancel_futures=not wait_for_actions)
        self._stops.shutdown(wait=wait_for_actions, cancel_futures=not wait_for_actions)
        self._reports.shutdown(wait=wait_for_actions, cancel_futures=not wait_for_actions)
        self._warm.close(wait_for_actions=wait_for_actions)
