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
from typing import Literal, Protocol

from nodeagent.portal_client import Conflict, PortalError, PortalUnavailable
from nodeagent.protocol import (
    REASON_MAX_CHARS,
    ReportedState,
    SessionReport,
    WarmReport,
    WarmState,
)
from nodeagent.runtime.base import ManagedContainer, WarmContainer

logger = logging.getLogger(__name__)

SendOutcome = Literal["sent", "conflict", "queued"]


class SessionReporter(Protocol):
    """The part of the portal the reconciler talks to (PortalClient, or a fake in tests)."""

    def report(self, session_id: int, report: SessionReport) -> str: ...

    def report_warm(self, key: str, report: WarmReport) -> str: ...


class ReportOutbox:
    """Reports to the portal, held back while it cannot take them. Thread-safe."""

    def __init__(self, reporter: SessionReporter) -> None:
        self._reporter = reporter
        self._lock = threading.Lock()  # held while sending: reports go out one at a time
        self._pending: dict[int, list[SessionReport]] = {}
        self._warm_pending: dict[str, WarmReport] = {}

    def send(self, session_id: int, report: SessionReport) -> SendOutcome:
        """Send after the session's earlier reports; the outcome is this report's."""
        with self._lock:
            self._pending.setdefault(session_id, []).append(report)
            return self._flush_session(session_id)

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

    def flush(self) -> None:
        """Send reports held back while the portal was unreachable."""
        with self._lock:
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
                    "session %s: %s report kept for later: %s", session_id, pending.state, error
                )
                return "queued"
            except Conflict as error:
                logger.info("session %s: portal refused %s (%s)", session_id, pending.state, error)
                outcome = "conflict"
            except PortalError as error:
                logger.error("session %s: portal rejected %s: %s", session_id, pending.state, error)
            queue.pop(0)
        self._pending.pop(session_id, None)
        return outcome

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


def cut_reason(reason: str) -> str:
    """At most REASON_MAX_CHARS: the portal refuses longer ones (400), and the report would be
    lost and the session stuck. Log tails make start failures long."""
    if len(reason) > REASON_MAX_CHARS:
        return reason[: REASON_MAX_CHARS - 1] + "…"
    return reason


def report(
    state: ReportedState, placement: str = "", *, reason: str | None = None
) -> SessionReport:
    """A report about one placement (no ``placement`` on the wire when the portal sent none)."""
    fields: dict[str, object] = {"state": state}
    if reason is not None:
        fields["reason"] = cut_reason(reason)
    if placement:
        fields["placement"] = placement
    return SessionReport.model_validate(fields)


def running_report(container: ManagedContainer, placement: str = "") -> SessionReport:
    """RUNNING, with where the desktop answers (``port`` null when simulated)."""
    fields: dict[str, object] = {
        "state": "RUNNING",
        "host": container.host,
        "port": container.port,
        "container_id": container.container_id,
    }
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
