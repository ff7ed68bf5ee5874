"""The reconciler's warm desktops: keep the portal's warm list started, nothing else.

The portal's ``warm`` list names desktops to keep started for a class booking
(:class:`~nodeagent.protocol.DesiredWarm`); they run with a random password and no user,
and are reported READY once they answer a VNC handshake. A warm desktop that leaves the
list unclaimed is stopped; one that fails is reported FAILED and not started again under
that key: the portal retries later with a new key. A key a desired session claims is left
to the session's claim (:mod:`nodeagent.reconcile`). Warm starts have their own small
pool, so they never hold up a session's start.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from nodeagent.outbox import ReportOutbox, warm_ready_report, warm_report
from nodeagent.protocol import DesiredWarm
from nodeagent.runtime.base import DesktopRuntime, ManagedContainer, StartFailed, WarmContainer

logger = logging.getLogger(__name__)


@dataclass
class WarmSteps:
    """What one step set in motion for warm desktops, by key."""

    starting: list[str] = field(default_factory=list)
    stopping: list[str] = field(default_factory=list)
    adopted: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)

    def is_quiet(self) -> bool:
        return not (self.starting or self.stopping or self.adopted or self.failed)


class WarmDesktops:
    """One node's warm desktops for the lifetime of one agent process."""

    def __init__(self, runtime: DesktopRuntime, outbox: ReportOutbox, *, workers: int = 2) -> None:
        self._runtime = runtime
        self._outbox = outbox
        self._actions = ThreadPoolExecutor(workers, thread_name_prefix="desktop-warm")
        self._lock = threading.Lock()
        # Starts/stops in flight, keys reported READY by this process, and keys that failed
        # here (never started again: a retry comes with a new key).
        self._in_flight: dict[str, Future[None]] = {}
        self._ready: set[str] = set()
        self._failed: set[str] = set()

    def step(
        self,
        warm: Sequence[DesiredWarm],
        found: Mapping[str, WarmContainer],
        busy: set[str],
        claiming: Mapping[str, int],
        busy_sessions: set[int],
    ) -> WarmSteps:
        """Keep the listed warm desktops started; stop those no longer listed.

        ``found``: the runtime's warm desktops; ``busy``: keys whose action was in flight
        before the listing; ``claiming``: warm key -> desired session placed on it;
        ``busy_sessions``: sessions whose action was in flight.
        """
        steps = WarmSteps()
        wanted = {w.key: w for w in warm}
        for key, container in found.items():
            if container.claimed_by is not None or key in busy:
                continue  # claimed: a session's desktop now (list_managed has it)
            if key in claiming:
                # A session is placed on it: its claim runs now or at the next step. A dead
                # one goes; the session then starts afresh.
                if not container.running and claiming[key] not in busy_sessions:
                    self._submit(key, lambda k=key: self._runtime.stop_warm(k))  # type: ignore[misc]
                continue
            if key not in wanted:
                steps.stopping.append(key)
                self._submit(key, lambda k=key: self._stop(k))  # type: ignore[misc]
            elif not container.running:
                steps.failed.append(key)
                self._failed.add(key)
                self._ready.discard(key)
                self._outbox.send_warm(key, warm_report("FAILED", reason=container.reason))
                self._submit(key, lambda k=key: self._runtime.stop_warm(k))  # type: ignore[misc]
            elif key not in self._ready:
                steps.adopted.append(key)
                self._submit(key, lambda c=container: self._adopt(c))  # type: ignore[misc]
        for key, desired in wanted.items():
            if key in found or key in busy or key in self._failed or key in claiming:
                continue
            if key in self._ready:
                steps.failed.append(key)
                self._failed.add(key)
                self._ready.discard(key)
                self._outbox.send_warm(
                    key, warm_report("FAILED", reason="warm desktop disappeared")
                )
                continue
            steps.starting.append(key)
            self._submit(key, lambda w=desired: self._start(w))  # type: ignore[misc]
        with self._lock:
            keep = set(wanted) | set(found) | set(self._in_flight)
            self._ready &= keep
            self._failed &= keep
        return steps

    # -- actions -------------------------------------------------------------------------

    def _start(self, warm: DesiredWarm) -> None:
        key = warm.key
        try:
            container = self._runtime.start_warm(warm)
        except StartFailed as error:
            logger.warning("warm desktop %s: start failed: %s", key, error)
            self._failed.add(key)
            self._outbox.send_warm(key, warm_report("FAILED", reason=str(error)))
            return
        logger.info("warm desktop %s ready on port %s", key, container.port)
        self._ready.add(key)
        self._outbox.send_warm(key, warm_ready_report(container))

    def _adopt(self, container: WarmContainer) -> None:
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
                self._failed.add(container.key)
                self._runtime.stop_warm(container.key)
                self._outbox.send_warm(container.key, warm_report("FAILED", reason=str(error)))
                return
        self._ready.add(container.key)
        self._outbox.send_warm(container.key, warm_ready_report(container))

    def _stop(self, key: str) -> None:
        self._runtime.stop_warm(key)
        with self._lock:
            self._ready.discard(key)
        self._outbox.drop_warm(key)
        logger.info("warm desktop %s: stopped (no longer wanted)", key)

    def _submit(self, key: str, task: Callable[[], None]) -> None:
        def run() -> None:
            try:
                task()
            except Exception:
                logger.exception("warm desktop %s: action failed", key)
            finally:
                with self._lock:
                    self._in_flight.pop(key, None)

        with self._lock:
            self._in_flight[key] = self._actions.submit(run)

    # -- views ---------------------------------------------------------------------------

    def in_flight(self) -> set[str]:
        with self._lock:
            return set(self._in_flight)

    def futures(self) -> list[Future[None]]:
        with self._lock:
            return list(self._in_flight.values())

    def close(self, *, wait_for_actions: bool = False) -> None:
        self._actions.shutdown(wait=wait_for_actions, cancel_futures=not wait_for_actions)
