"""Carrying out the Files page's home tasks (``DesiredState.home_tasks``,
:mod:`nodeagent.protocol_files`) on a small pool of threads, beside the reconciler.

Each task listed in a desired state is started once (its id is remembered while the portal
lists it): a listing or a deletion, in the home's folder on this node
(:meth:`~nodeagent.runtime.base.DesktopRuntime.home_folder`) through
:class:`~nodeagent.home_files.HomeFolder`, which never follows a link. Then its report goes
to the portal, with what the home holds afterwards. A 409 (the portal no longer waits for
the task) drops it; an unreachable portal gets the report once more, then the task is
dropped too (the portal fails it after its timeout). One INFO line per task; never a file's
contents. Uploads and downloads are no task: they go through the node's gateway
(:mod:`nodeagent.gateway.files`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Protocol

from nodeagent.home_files import HomeFileError, HomeFolder, shown
from nodeagent.portal_client import Conflict, PortalError, PortalUnavailable
from nodeagent.protocol_files import HomeTask, HomeTaskAnswer, HomeTaskReport
from nodeagent.wire_types import cut_reason as cut

logger = logging.getLogger(__name__)

HOME_TASK_WORKERS = 2
REPORT_RETRY_S = 2.0  # before the one more try of a report the portal did not answer


class HomeClient(Protocol):
    """What the runner needs of :class:`~nodeagent.portal_client.PortalClient`."""

    def report_home_task(self, task_id: int, report: HomeTaskReport) -> HomeTaskAnswer: ...


class HomeRuntime(Protocol):
    def home_folder(self, home_volume: str, *, create: bool) -> Path | None: ...


class HomeTaskRunner:
    """Starts each listed home task once, on :data:`HOME_TASK_WORKERS` threads."""

    def __init__(
        self,
        runtime: HomeRuntime,
        client: HomeClient,
        *,
        workers: int = HOME_TASK_WORKERS,
        retry_s: float = REPORT_RETRY_S,
    ) -> None:
        self.runtime = runtime
        self.client = client
        self.retry_s = retry_s
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="home-task")
        self._lock = threading.Lock()
        self._started: set[int] = set()
        self._futures: set[Future[None]] = set()
        self._closing = threading.Event()

    def offer(self, tasks: Sequence[HomeTask]) -> None:
        """The tasks of the latest desired state: start those not started yet; forget the
        ids no longer listed (the portal lists a task until it is reported or timed out)."""
        with self._lock:
            if self._closing.is_set():
                return
            self._started &= {task.id for task in tasks}
            for task in tasks:
                if task.id in self._started:
                    continue
                self._started.add(task.id)
                future = self._pool.submit(self._run, task)
                self._futures.add(future)
                future.add_done_callback(self._futures.discard)

    def wait_idle(self, timeout_s: float) -> None:
        """Wait for the tasks started so far (``--once``, tests)."""
        with self._lock:
            pending = set(self._futures)
        wait(pending, timeout=timeout_s)

    def close(self) -> None:
        """Start nothing more, and drop the tasks not started (the portal times them out);
        a task under way ends on its own (Python waits for it at exit: its transfers have
        timeouts)."""
        with self._lock:
            self._closing.set()
        self._pool.shutdown(wait=False, cancel_futures=True)

    # -- one task ------------------------------------------------------------------------

    def _run(self, task: HomeTask) -> None:
        started = time.monotonic()
        try:
            report, done = self._carry_out(task)
        except Exception as error:  # a bug or the engine: the person still gets an answer
            logger.exception("home task %s %s failed", task.id, task.kind)
            report = HomeTaskReport(ok=False, reason=cut(f"The node could not do this: {error}"))
            done = "failed"
        outcome = self._report(task, report)
        logger.info(
            "home task %s %s: %s%s (%.1f s)",
            task.id,
            task.kind,
            done if report.ok else f"refused: {report.reason}",
            "" if outcome == "" else f"; report {outcome}",
            time.monotonic() - started,
        )

    def _carry_out(self, task: HomeTask) -> tuple[HomeTaskReport, str]:
        """The task's report and, for the log, what was done."""
        folder = self.runtime.home_folder(task.home_volume, create=False)
        if folder is None:  # no home here yet: an empty one
            if task.kind == "list" and task.path == "":
                return HomeTaskReport(ok=True, used_bytes=0), "listed an empty home"
            what = "folder" if task.kind == "list" else "file or folder"
            reason = cut(f"No {what} named {shown(task.path)} in your home.")
            return HomeTaskReport(ok=False, reason=reason, used_bytes=0), "no home"
        try:
            with HomeFolder.open(folder) as home:
                try:
                    report, done = self._in_home(task, home)
                except HomeFileError as error:  # refused: the home's size still goes with it
                    report, done = HomeTaskReport(ok=False, reason=cut(str(error))), "refused"
                return report.model_copy(update={"used_bytes": _used(home)}), done
        except HomeFileError as error:  # the home itself cannot be opened
            return HomeTaskReport(ok=False, reason=cut(str(error))), "refused"

    def _in_home(self, task: HomeTask, home: HomeFolder) -> tuple[HomeTaskReport, str]:
        if task.kind == "list":
            listing = home.list(task.path)
            if listing.skipped:
                logger.info("home task %s: %d name(s) not UTF-8 left out", task.id, listing.skipped)
            report = HomeTaskReport(ok=True, entries=listing.entries, truncated=listing.truncated)
            return report, f"listed {len(listing.entries)} entries"
        home.delete(task.path)
        return HomeTaskReport(ok=True), "deleted"

    def _report(self, task: HomeTask, report: HomeTaskReport) -> str:
        """Send the report (once more if the portal did not answer); '' when taken, else
        what became of it, for the log line."""
        for attempt in (1, 2):
            try:
                self.client.report_home_task(task.id, report)
                return ""
            except Conflict:
                return "dropped (409: no longer pending)"
            except PortalUnavailable as error:
                logger.warning("home task %s: report not answered (%s)", task.id, error)
                if attempt == 1 and not self._closing.wait(self.retry_s):
                    continue
                return "dropped (portal unreachable)"
            except PortalError as error:
                logger.error("home task %s: report refused: %s", task.id, error)
                return "dropped (refused)"
        return "dropped"


def _used(home: HomeFolder) -> int | None:
    try:
        return home.used_bytes()
    except OSError as error:
        logger.warning("could not measure home %s: %s", home.root, error)
        return None
