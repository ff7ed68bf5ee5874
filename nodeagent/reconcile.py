"""Converge this node's desktop containers to the portal's desired sessions.

Level-triggered: every :meth:`Reconciler.step` looks at the whole picture (desired
sessions, containers found by label) and fixes the difference, so a missed message,
an agent restart or a killed container all heal on the next step. Bookkeeping is per
placement (the desired session's ``placement``): a session requeued and placed here again
is a new desktop, and a container of its earlier placement is replaced, never adopted.
Starts and stops run in thread pools: ten desktops start in parallel and a slow start
never holds up a stop. Reports that cannot reach the portal are kept and sent, in order, later.

Warm pool: the portal's ``warm`` list names desktops to keep started for a class booking
(:class:`~nodeagent.protocol.DesiredWarm`); they run with a random password and no user, and
are reported READY once they answer a VNC handshake. A desired session with a ``warm_key``
claims that running desktop instead of starting one (falling back to a fresh start when the
claim fails). A warm desktop that leaves the list unclaimed is stopped; one that fails is
reported FAILED and not started again under that key: the portal retries later with a new key.
Warm starts have their own small pool, so they never hold up a session's start.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Literal, Protocol

from nodeagent.portal_client import Conflict, PortalError, PortalUnavailable
from nodeagent.protocol import (
    REASON_MAX_CHARS,
    DesiredSession,
    DesiredWarm,
    ReportedState,
    SessionReport,
    WarmReport,
)
from nodeagent.runtime import DesktopRuntime, ManagedContainer, StartFailed, WarmContainer

logger = logging.getLogger(__name__)

SendOutcome = Literal["sent", "conflict", "queued"]


class SessionReporter(Protocol):
    """The part of the portal the reconciler talks to (PortalClient, or a fake in tests)."""

    def report(self, session_id: int, report: SessionReport) -> str: ...

    def report_warm(self, key: str, report: WarmReport) -> str: ...


@dataclass
class StepSummary:
    """What one step set in motion (for logs and tests)."""

    starting: list[int] = field(default_factory=list)
    stopping: list[int] = field(default_factory=list)
    lost: list[int] = field(default_factory=list)
    adopted: list[int] = field(default_factory=list)
    replaced: list[int] = field(default_factory=list)  # container of an earlier placement
    claiming: list[int] = field(default_factory=list)  # sessions claiming a warm desktop
    warm_starting: list[str] = field(default_factory=list)
    warm_stopping: list[str] = field(default_factory=list)
    warm_adopted: list[str] = field(default_factory=list)
    warm_failed: list[str] = field(default_factory=list)

    def is_quiet(self) -> bool:
        return not (
            self.starting
            or self.stopping
            or self.lost
            or self.adopted
            or self.replaced
            or self.claiming
            or self.warm_starting
            or self.warm_stopping
            or self.warm_adopted
            or self.warm_failed
        )


def placement_of(session: DesiredSession) -> str:
    """The desired session's placement id; "" from a portal that sends none."""
    return session.get("placement", "")


def is_earlier_placement(container: ManagedContainer, session: DesiredSession) -> bool:
    """True when the container was made for another placement of this session.

    A container without the label (made by an older agent, or for a portal that sends no
    placement) cannot tell and is adopted as before.
    """
    wanted = placement_of(session)
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
    ) -> None:
        self._runtime = runtime
        self._reporter = reporter
        self._starts = ThreadPoolExecutor(start_workers, thread_name_prefix="desktop-start")
        self._stops = ThreadPoolExecutor(stop_workers, thread_name_prefix="desktop-stop")
        self._lock = threading.Lock()
        self._report_lock = threading.Lock()
        self._in_flight: dict[int, Future[None]] = {}
        # Placements this process will not start again while they stay desired (FAILED,
        # LOST, ...): session id -> (placement, state). A new placement starts afresh.
        self._finished: dict[int, tuple[str, ReportedState]] = {}
        # Placements reported RUNNING by this process (started here or adopted): id -> placement.
        self._announced: dict[int, str] = {}
        self._pending: dict[int, list[SessionReport]] = {}
        self._desired: dict[int, DesiredSession] = {}
        # The warm pool, by key: starts/stops in flight, keys reported READY by this process,
        # keys that failed here (never started again: a retry comes with a new key), and
        # the latest report per key the portal did not get yet.
        self._warm_actions = ThreadPoolExecutor(warm_workers, thread_name_prefix="desktop-warm")
        self._warm_in_flight: dict[str, Future[None]] = {}
        self._warm_ready: set[str] = set()
        self._warm_failed: set[str] = set()
        self._warm_pending: dict[str, WarmReport] = {}

    # -- the step ------------------------------------------------------------------------

    def step(
        self, desired: Sequence[DesiredSession], warm: Sequence[DesiredWarm] = ()
    ) -> StepSummary:
        """Compare desired sessions (and warm desktops) with the containers found and act."""
        self.flush_reports()
        summary = StepSummary()
        wanted = {session["session_id"]: session for session in desired}
        # In-flight first, then the listing: an action that ends in between is then
        # visible in the listing, so it can never be started twice.
        with self._lock:
            self._desired = wanted
            busy = set(self._in_flight)
            warm_busy = set(self._warm_in_flight)
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
            placement = placement_of(session)
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
            placement = placement_of(session)
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
            key = session.get("warm_key", "")
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
        self._step_warm(warm, wanted, warm_found, warm_busy, busy, summary)
        self._forget_undesired(wanted, containers)
        return summary

    def _step_warm(
        self,
        warm: Sequence[DesiredWarm],
        wanted: dict[int, DesiredSession],
        found: dict[str, WarmContainer],
        warm_busy: set[str],
        busy: set[int],
        summary: StepSummary,
    ) -> None:
        """Keep the portal's warm desktops started; stop those it no longer lists."""
        wanted_warm = {w["key"]: w for w in warm}
        claiming = {s["warm_key"]: s for s in wanted.values() if s.get("warm_key")}
        for key, container in found.items():
            if container.claimed_by is not None or key in warm_busy:
                continue  # claimed: a session's desktop now (list_managed has it)
            if key in claiming:
                # A session is placed on it: its claim runs now or at the next step. A dead
                # one goes; the session then starts afresh.
                if not container.running and claiming[key]["session_id"] not in busy:
                    self._submit_warm(key, lambda k=key: self._runtime.stop_warm(k))  # type: ignore[misc]
                continue
            if key not in wanted_warm:
                summary.warm_stopping.append(key)
                self._submit_warm(key, lambda k=key: self._stop_warm(k))  # type: ignore[misc]
            elif not container.running:
                summary.warm_failed.append(key)
                self._warm_failed.add(key)
                self._warm_ready.discard(key)
                self._send_warm(key, warm_report("FAILED", reason=container.reason))
                self._submit_warm(key, lambda k=key: self._runtime.stop_warm(k))  # type: ignore[misc]
            elif key not in self._warm_ready:
                summary.warm_adopted.append(key)
                self._submit_warm(key, lambda c=container: self._adopt_warm(c))  # type: ignore[misc]
        for key, desired_warm in wanted_warm.items():
            if key in found or key in warm_busy or key in self._warm_failed or key in claiming:
                continue
            if key in self._warm_ready:
                summary.warm_failed.append(key)
                self._warm_failed.add(key)
                self._warm_ready.discard(key)
                self._send_warm(key, warm_report("FAILED", reason="warm desktop disappeared"))
                continue
            summary.warm_starting.append(key)
            self._submit_warm(key, lambda w=desired_warm: self._start_warm(w))  # type: ignore[misc]
        with self._lock:
            keep = set(wanted_warm) | set(found) | set(self._warm_in_flight)
            self._warm_ready &= keep
            self._warm_failed &= keep

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

    def _finished_state(self, session_id: int, placement: str) -> ReportedState | None:
        finished = self._finished.get(session_id)
        return finished[1] if finished is not None and finished[0] == placement else None

    def _finish(self, session_id: int, placement: str, state: ReportedState) -> None:
        self._finished[session_id] = (placement, state)

    def _is_announced(self, session_id: int, placement: str) -> bool:
        return self._announced.get(session_id) == placement

    # -- actions -------------------------------------------------------------------------

    def _start(self, session: DesiredSession, *, claim: str = "") -> None:
        session_id = session["session_id"]
        placement = placement_of(session)
        if self._send(session_id, report("STARTING", placement)) == "conflict":
            logger.info("session %s: portal no longer wants it, not starting", session_id)
            self._finish(session_id, placement, "ENDED")
            return
        try:
            container = self._claim_or_start(session, claim)
        except StartFailed as error:
            logger.warning("session %s: start failed: %s", session_id, error)
            self._finish(session_id, placement, "FAILED")
            self._send(session_id, report("FAILED", placement, reason=str(error)))
            return
        logger.info("session %s: desktop running on port %s", session_id, container.port)
        self._announced[session_id] = placement
        if self._send(session_id, running_report(container, placement)) == "conflict":
            self._finish(session_id, placement, "ENDED")
            self._runtime.stop(session_id)

    def _claim_or_start(self, session: DesiredSession, claim: str) -> ManagedContainer:
        if claim:
            try:
                return self._runtime.claim(claim, session)
            except StartFailed as error:
                # The runtime removed that warm desktop; the session still gets one.
                logger.warning(
                    "session %s: claiming warm desktop %s failed (%s); starting a new desktop",
                    session["session_id"],
                    claim,
                    error,
                )
        return self._runtime.start(session)

    # -- warm actions --------------------------------------------------------------------

    def _start_warm(self, warm: DesiredWarm) -> None:
        key = warm["key"]
        try:
            container = self._runtime.start_warm(warm)
        except StartFailed as error:
            logger.warning("warm desktop %s: start failed: %s", key, error)
            self._warm_failed.add(key)
            self._send_warm(key, warm_report("FAILED", reason=str(error)))
            return
        logger.info("warm desktop %s ready on port %s", key, container.port)
        self._warm_ready.add(key)
        self._send_warm(key, warm_ready_report(container))

    def _adopt_warm(self, container: WarmContainer) -> None:
        """A warm desktop found running (started before an agent restart): check, say READY."""
        wait_ready = getattr(self._runtime, "wait_ready", None)
        if wait_ready is not None:
            probe = ManagedContainer(
                session_id=0,
                container_id=container.container_id,
                running=container.running,
                status=container.status,
                host="",
                port=container.port,
            )
            try:
                wait_ready(probe)
            except StartFailed as error:
                logger.warning("warm desktop %s: adopted but not ready: %s", container.key, error)
                self._warm_failed.add(container.key)
                self._runtime.stop_warm(container.key)
                self._send_warm(container.key, warm_report("FAILED", reason=str(error)))
                return
        self._warm_ready.add(container.key)
        self._send_warm(container.key, warm_ready_report(container))

    def _stop_warm(self, key: str) -> None:
        self._runtime.stop_warm(key)
        with self._lock:
            self._warm_ready.discard(key)
            self._warm_pending.pop(key, None)
        logger.info("warm desktop %s: stopped (no longer wanted)", key)

    def _submit_warm(self, key: str, task: Callable[[], None]) -> None:
        def run() -> None:
            try:
                task()
            except Exception:
                logger.exception("warm desktop %s: action failed", key)
            finally:
                with self._lock:
                    self._warm_in_flight.pop(key, None)

        with self._lock:
            self._warm_in_flight[key] = self._warm_actions.submit(run)

    def _send_warm(self, key: str, body: WarmReport) -> SendOutcome:
        """Report about a warm desktop; the latest one is kept while the portal is down."""
        with self._report_lock:
            self._warm_pending[key] = body
            return self._flush_warm(key)

    def _flush_warm(self, key: str) -> SendOutcome:
        body = self._warm_pending.get(key)
        if body is None:
            return "sent"
        try:
            self._reporter.report_warm(key, body)
        except PortalUnavailable as error:
            logger.warning(
                "warm desktop %s: %s report kept for later: %s", key, body["state"], error
            )
            return "queued"
        except Conflict as error:
            # The portal no longer wants it (booking cancelled or over): it has left the warm
            # list, so the next step stops it.
            logger.info("warm desktop %s: portal refused %s (%s)", key, body["state"], error)
            self._warm_pending.pop(key, None)
            return "conflict"
        except PortalError as error:
            logger.error("warm desktop %s: portal rejected %s: %s", key, body["state"], error)
        self._warm_pending.pop(key, None)
        return "sent"

    def _replace(self, session: DesiredSession) -> None:
        session_id = session["session_id"]
        logger.info(
            "session %s: desktop of an earlier placement found; replacing it for placement %s",
            session_id,
            placement_of(session),
        )
        self._runtime.stop(session_id)
        with self._lock:
            self._announced.pop(session_id, None)
        self._start(session)

    def _adopt(self, container: ManagedContainer, placement: str) -> None:
        logger.info(
            "session %s: adopting running container %s",
            container.session_id,
            container.container_id[:12],
        )
        wait_ready = getattr(self._runtime, "wait_ready", None)
        if wait_ready is None:  # e.g. the simulated runtime: nothing to wait for
            self._announced[container.session_id] = placement
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
                self._send(session_id, report("FAILED", placement, reason=str(error)))
                return
            self._announced[ready.session_id] = placement
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

    def _submit(self, pool: ThreadPoolExecutor, session_id: int, task: Callable[[], None]) -> None:
        def run() -> None:
            try:
                task()
            except Exception:
                # Level-triggered: the next step sees the same difference and tries again.
                logger.exception("session %s: reconcile action failed", session_id)
            finally:
                with self._lock:
                    self._in_flight.pop(session_id, None)

        with self._lock:
            self._in_flight[session_id] = pool.submit(run)

    # -- reports -------------------------------------------------------------------------

    def _send(self, session_id: int, report: SessionReport) -> SendOutcome:
        with self._report_lock:
            self._pending.setdefault(session_id, []).append(report)
            return self._flush_session(session_id)

    def flush_reports(self) -> None:
        """Send reports held back while the portal was unreachable."""
        with self._report_lock:
            for session_id in list(self._pending):
                if self._flush_session(session_id) == "queued":
                    return  # still unreachable: don't wait for a timeout per session
            for key in list(self._warm_pending):
                if self._flush_warm(key) == "queued":
                    return

    def _flush_session(self, session_id: int) -> SendOutcome:
        # The outcome is the last report's: an older report refused (e.g. one about an
        # earlier placement, held back while the portal was down) says nothing about it.
        queue = self._pending.get(session_id, [])
        outcome: SendOutcome = "sent"
        while queue:
            pending = queue[0]
            outcome = "sent"
            try:
                self._reporter.report(session_id, pending)
            except PortalUnavailable as error:
                logger.warning(
                    "session %s: %s report kept for later: %s", session_id, pending["state"], error
                )
                return "queued"
            except Conflict as error:
                logger.info(
                    "session %s: portal refused %s (%s)", session_id, pending["state"], error
                )
                outcome = "conflict"
            except PortalError as error:
                logger.error(
                    "session %s: portal rejected %s: %s", session_id, pending["state"], error
                )
            queue.pop(0)
        self._pending.pop(session_id, None)
        return outcome

    # -- views for the heartbeat ---------------------------------------------------------

    def busy_devices(self, running_ids: Sequence[int]) -> list[str]:
        """GPU/MIG UUIDs held by running sessions, one entry per session slice."""
        with self._lock:
            return [
                device
                for session_id in running_ids
                if (session := self._desired.get(session_id)) is not None
                for device in session["gpu_devices"]
            ]

    def in_flight(self) -> set[int]:
        with self._lock:
            return set(self._in_flight)

    def warm_in_flight(self) -> set[str]:
        with self._lock:
            return set(self._warm_in_flight)

    def wait_idle(self, timeout_s: float = 60.0) -> bool:
        """Wait for the starts and stops in flight (tests, and a tidy shutdown)."""
        with self._lock:
            futures = list(self._in_flight.values()) + list(self._warm_in_flight.values())
        _, not_done = wait(futures, timeout=timeout_s)
        return not not_done

    def close(self, *, wait_for_actions: bool = False) -> None:
        """Stop taking work. Desktops keep running: they outlive the agent."""
        self._starts.shutdown(wait=wait_for_actions, cancel_futures=not wait_for_actions)
        self._stops.shutdown(wait=wait_for_actions, cancel_futures=not wait_for_actions)
        self._warm_actions.shutdown(wait=wait_for_actions, cancel_futures=not wait_for_actions)


def report(state: ReportedState, placement: str, **fields: object) -> SessionReport:
    """A report about one placement (no ``placement`` key when the portal sent none)."""
    body = SessionReport(state=state, **fields)  # type: ignore[typeddict-item]
    if len(reason := body.get("reason", "")) > REASON_MAX_CHARS:
        # The portal refuses longer ones (400): the report would be lost and the session
        # stuck. Log tails make start failures long.
        body["reason"] = reason[: REASON_MAX_CHARS - 1] + "…"
    if placement:
        body["placement"] = placement
    return body


def running_report(container: ManagedContainer, placement: str = "") -> SessionReport:
    body = report(
        "RUNNING",
        placement,
        host=container.host,
        port=container.port,
        container_id=container.container_id,
    )
    if container.simulated:
        body["reason"] = "SIMULATED desktop: no container runs on this node"
    return body


def warm_report(state: Literal["READY", "FAILED"], **fields: object) -> WarmReport:
    body = WarmReport(state=state, **fields)  # type: ignore[typeddict-item]
    if len(reason := body.get("reason", "")) > REASON_MAX_CHARS:
        body["reason"] = reason[: REASON_MAX_CHARS - 1] + "…"
    return body


def warm_ready_report(container: WarmContainer) -> WarmReport:
    return warm_report("READY", port=container.port, container_id=container.container_id)
