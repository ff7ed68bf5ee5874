"""The report outbox: what the agent tells the portal about desktops, kept until it is heard.

Session reports are sent in order, per session; those the portal cannot take yet (down,
unreachable) wait in the outbox and are sent first at the next chance, so a STARTING is
never overtaken by its RUNNING. Of a warm desktop only the latest report matters, so one
per key is kept. The builders below make every report from the protocol's models, cutting
reasons to what the portal stores.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Literal, Protocol

from nodeagent.portal_client import Conflict, PortalError, PortalUnavailable
from nodeagent.protocol import (
    MAX_BATCH,
    BatchedReport,
    ReportBatch,
    ReportedState,
    SessionReport,
    WarmReport,
    WarmState,
)
from nodeagent.runtime.base import ManagedContainer, StartFailed, WarmContainer
from nodeagent.wire_types import cut_reason

logger = logging.getLogger(__name__)
# Reports per request: each batch is one transaction on the portal, kept well inside the
# client's timeout on a busy portal (the protocol allows up to MAX_BATCH).
BATCH_SIZE = min(50, MAX_BATCH)
# A STARTING with nothing queued after it about its session is held back this long, in case
# its RUNNING follows: sent together, the portal makes one transition (PLACED → RUNNING) and
# one broadcast instead of two. A desktop slower to start is reported STARTING by the first
# send after that (the reconcile step sends every second).
STARTING_LINGER_S = 0.5
# A warm claim's STARTING is held back longer. One claim alone takes about 50 ms
# (``bench.claim_cost``), but a class start claims dozens at once on one node, and on a
# small node each then takes a second or more: every STARTING sent alone was then a
# transition, an audit row, a broadcast and a page update of its own for a state that lasted
# a moment, at the moment the portal is busiest. A claim slower than this (or one that fell
# back to a cold start) is reported STARTING by the first send after it.
CLAIM_STARTING_LINGER_S = 3.0

SendOutcome = Literal["sent", "conflict", "queued"]


class SessionReporter(Protocol):
    """The part of the portal the reconciler talks to (PortalClient, or a fake in tests).
    A reporter may also have ``report_batch`` (PortalClient does): then reports go out
    batched, many in one request."""

    def report(self, session_id: int, report: SessionReport) -> str: ...

    def report_warm(self, key: str, report: WarmReport) -> str: ...


@dataclass(eq=False)
class _Ticket:
    session_id: int
    report: SessionReport
    outcome: SendOutcome | None = None
    posted: float = field(default_factory=time.monotonic)
    linger: float | None = None  # a STARTING's own hold (None: STARTING_LINGER_S)


def _lingers(ticket: _Ticket, now: float) -> bool:
    """Whether ``ticket`` is a STARTING still within its linger."""
    if ticket.report.state != "STARTING":
        return False
    linger = STARTING_LINGER_S if ticket.linger is None else ticket.linger
    return now - ticket.posted < linger


class ReportOutbox:
    """Reports to the portal, held back while it cannot take them. Thread-safe.

    Session reports from every start and stop worker queue in one line, in order. Whoever
    sends takes everything queued so far into one batch (``POST reports/``); a report
    queued meanwhile goes in the next batch, sent by its own worker as soon as the one in
    flight is answered. So 200 desktops starting at once cost a few requests, not 400. A
    desktop's STARTING waits up to STARTING_LINGER_S (a warm claim's up to
    CLAIM_STARTING_LINGER_S) for its RUNNING, to go with it.
    """

    def __init__(self, reporter: SessionReporter) -> None:
        self._reporter = reporter
        self._lock = threading.Lock()  # held while sending: one request in flight
        self._queue_lock = threading.Lock()
        self._pending: list[_Ticket] = []  # in order, across sessions
        self._warm_pending: dict[str, WarmReport] = {}
        self._batch = getattr(reporter, "report_batch", None)

    def send(self, session_id: int, report: SessionReport) -> SendOutcome:
        """Send after the earlier reports; the outcome is this report's."""
        return self.outcome(self.post(session_id, report))

    def post(
        self, session_id: int, report: SessionReport, *, linger: float | None = None
    ) -> _Ticket:
        """Queue a report without waiting: it goes out with the next batch, before any
        report queued after it (the session's RUNNING, say). :meth:`outcome` waits for the
        portal's answer to it. ``linger``: how long a STARTING is held back while it is the
        last report of its session (None: STARTING_LINGER_S)."""
        ticket = _Ticket(session_id, report, linger=linger)
        with self._queue_lock:
            self._pending.append(ticket)
        return ticket

    def outcome(self, ticket: _Ticket) -> SendOutcome:
        """The portal's answer to a posted report: sent now (with everything queued before
        and since) unless a batch that held it was answered meanwhile."""
        with self._lock:
            if ticket.outcome is None:
                self._flush_sessions(hold=ticket.report.state != "STARTING")
        return ticket.outcome or "queued"

    def send_warm(self, key: str, report: WarmReport) -> SendOutcome:
        """Report about a warm desktop; the latest one is kept while the portal is down."""
        with self._lock:
            self._warm_pending[key] = report
            return self._flush_warm(key)

    def drop_warm(self, key: str) -> None:
        """Forget what is still to be said about a warm desktop that is gone."""
        # Without the lock, not to wait for a send in flight: a dict's pop is atomic, and
        # a flush that comes after finds nothing to send.
        self._warm_pending.pop(key, None)

    def flush(self, *, wait: bool = True) -> None:
        """Send reports held back while the portal was unreachable. ``wait=False``: not if
        a send is in flight (that one's sender sends what is queued)."""
        if not self._lock.acquire(blocking=wait):
            return
        try:
            self._flush_all()
        finally:
            self._lock.release()

    def _flush_all(self) -> None:
        while self._sendable(hold=True):
            if not self._flush_sessions(hold=True):
                return  # still unreachable: don't wait for a timeout per report
        for key in list(self._warm_pending):
            if self._flush_warm(key) == "queued":
                return

    def _sendable(self, *, hold: bool) -> list[_Ticket]:
        """The queue, in order; with ``hold``, less each STARTING younger than its linger
        that is the last report queued about its session (so no report of that session is
        sent before it)."""
        with self._queue_lock:
            queued = list(self._pending)
        if not hold:
            return queued
        now = time.monotonic()
        last = {t.session_id: t for t in queued}
        return [t for t in queued if not (last[t.session_id] is t and _lingers(t, now))]

    def _flush_sessions(self, *, hold: bool) -> bool:
        """Send what is queued (one batch; see :meth:`_sendable`); False when the portal is
        unreachable."""
        batch = self._sendable(hold=hold)[:BATCH_SIZE]
        if not batch:
            return True
        try:
            outcomes = self._send_batch(batch) if self._batch else self._send_one_by_one(batch)
        except PortalUnavailable as error:
            logger.warning("%d report(s) kept for later: %s", len(batch), error)
            for ticket in batch:
                ticket.outcome = "queued"
            return False
        for ticket, outcome in zip(batch, outcomes, strict=False):
            ticket.outcome = outcome
        with self._queue_lock:
            done = {id(t) for t in batch[: len(outcomes)]}
            self._pending = [t for t in self._pending if id(t) not in done]
        return len(outcomes) == len(batch)

    def _send_batch(self, batch: list[_Ticket]) -> list[SendOutcome]:
        reports = [
            BatchedReport(session_id=t.session_id, **t.report.model_dump(exclude_unset=True))
            for t in batch
        ]
        try:
            answer = self._batch(ReportBatch(reports=reports))  # type: ignore[misc]
        except PortalError as error:
            if error.status_code == 404 and not isinstance(error, PortalUnavailable):
                logger.warning("the portal has no reports/ (older portal): one by one instead")
                self._batch = None
                return self._send_one_by_one(batch)
            raise
        outcomes: list[SendOutcome] = []
        for ticket, result in zip(batch, answer.results, strict=False):
            if result.outcome == "conflict":
                logger.info(
                    "session %s: portal refused %s (%s)",
                    ticket.session_id,
                    ticket.report.state,
                    result.detail,
                )
                outcomes.append("conflict")
            else:
                if result.outcome == "refused":
                    logger.error(
                        "session %s: portal rejected %s: %s",
                        ticket.session_id,
                        ticket.report.state,
                        result.detail,
                    )
                outcomes.append("sent")
        return outcomes

    def _send_one_by_one(self, batch: list[_Ticket]) -> list[SendOutcome]:
        """Against a reporter without batches: each in turn, up to the first outage."""
        outcomes: list[SendOutcome] = []
        for ticket in batch:
            try:
                self._reporter.report(ticket.session_id, ticket.report)
                outcomes.append("sent")
            except PortalUnavailable as error:
                if not outcomes:
                    raise
                logger.warning("reports kept for later: %s", error)
                break
            except Conflict as error:
                logger.info(
                    "session %s: portal refused %s (%s)",
                    ticket.session_id,
                    ticket.report.state,
                    error,
                )
                outcomes.append("conflict")
            except PortalError as error:
                logger.error(
                    "session %s: portal rejected %s: %s",
                    ticket.session_id,
                    ticket.report.state,
                    error,
                )
                outcomes.append("sent")
        return outcomes

    def _flush_warm(self, key: str) -> SendOutcome:
        body = self._warm_pending.get(key)
        if body is None:
            return "sent"
        try:
            self._reporter.report_warm(key, body)
        except PortalUnavailable as error:
            logger.warning("warm desktop %s: %s report kept for later: %s", key, body.state, error)
            return "queued"
        except Conflict as error:
            # The portal no longer wants it (booking cancelled or over): it has left the warm
            # list, so the next step stops it.
            logger.info("warm desktop %s: portal refused %s (%s)", key, body.state, error)
            self._warm_pending.pop(key, None)
            return "conflict"
        except PortalError as error:
            logger.error("warm desktop %s: portal rejected %s: %s", key, body.state, error)
        self._warm_pending.pop(key, None)
        return "sent"


def report(
    state: ReportedState, placement: str = "", *, reason: str | None = None, failure: str = ""
) -> SessionReport:
    """A report about one placement (no ``placement`` on the wire when the portal sent none;
    ``failure``: a FAILED report's code, nodeagent.failures)."""
    fields: dict[str, object] = {"state": state}
    if reason is not None:
        fields["reason"] = cut_reason(reason)
    if failure:
        fields["failure"] = failure
    if placement:
        fields["placement"] = placement
    return SessionReport.model_validate(fields)


def failed_report(error: StartFailed, placement: str = "") -> SessionReport:
    """FAILED, with the runtime's words and their failure code (nodeagent.failures)."""
    return report("FAILED", placement, reason=str(error), failure=error.code)


def running_report(container: ManagedContainer, placement: str = "") -> SessionReport:
    """RUNNING, with where the desktop answers (``port`` null when simulated) and its sound
    port where it has one."""
    fields: dict[str, object] = {
        "state": "RUNNING",
        "host": container.host,
        "port": container.port,
        "container_id": container.container_id,
    }
    if container.audio_port is not None:
        fields["audio_port"] = container.audio_port
    if container.simulated:
        fields["reason"] = "SIMULATED desktop: no container runs on this node"
    if placement:
        fields["placement"] = placement
    return SessionReport.model_validate(fields)


def warm_report(state: WarmState, *, reason: str | None = None) -> WarmReport:
    return WarmReport.model_validate(
        {"state": state} if reason is None else {"state": state, "reason": cut_reason(reason)}
    )


def warm_ready_report(container: WarmContainer) -> WarmReport:
    return WarmReport(state="READY", port=container.port, container_id=container.container_id)
