"""The agent's side of its gateway process: start it, feed it, hear it, restart it. No Django.

``python -m nodeagent`` runs one :class:`GatewaySupervisor`, which runs ``python -m
nodeagent.gateway --bind ADDRESS --port PORT`` as its child and speaks JSON lines with it
(:mod:`nodeagent.gateway.messages`): the child's first line says where it listens
(``{"listening": <port>}``), every later one is a
:class:`~nodeagent.protocol_gateway.GatewayEvent`; the child reads whole
:class:`~nodeagent.gateway.messages.GatewayState` lines on its standard input and exits
when that closes, so a gateway never outlives its agent by more than a read.

The desktops' secrets travel only on that pipe: never in the child's arguments, its
environment (the agent's own secrets are taken out of it) or a file.

Three threads: the supervising thread starts the child, reads its lines and restarts it
when it dies (1 s, doubling to 30 s); the writing thread writes the latest state whenever
it changed, and whole to each new child, so a child that does not read never holds up the
agent; the events wait in a bounded queue (the oldest dropped when full, and counted) for
whoever forwards them (:mod:`nodeagent.gateway_link`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import IO

from pydantic import ValidationError

from nodeagent.gateway.messages import STATE_LINE_MAX_BYTES, GatewayListening, GatewayState
from nodeagent.protocol_gateway import GATEWAY_EVENTS_MAX, GatewayEvent

logger = logging.getLogger(__name__)

# The child must say where it listens within this, or it is ended and started again.
LISTEN_TIMEOUT_S = 10.0
RESTART_FIRST_S = 1.0
RESTART_MAX_S = 30.0
# A child that lived this long died of something new: the next restart is quick again.
STABLE_S = 60.0
# Events waiting for the portal; beyond this the oldest go (the portal unreachable for long).
EVENTS_MAX = 10_000
# After its standard input closes, the child has this long to exit; after SIGTERM as long.
STOP_GRACE_S = 5.0
# One line from the child: an event is a few hundred bytes; longer lines are skipped.
LINE_MAX = 64 * 1024
# Variables of the agent the child does not get: the join token and anything like it.
SECRET_NAME_PARTS = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL")


def gateway_command(bind: str, port: int, trusted_proxies: Sequence[str] = ()) -> list[str]:
    """The gateway's command line: where to listen and whom to trust for the browser's
    address (nginx), nothing secret."""
    command = [sys.executable, "-m", "nodeagent.gateway", "--bind", bind, "--port", str(port)]
    for network in trusted_proxies:
        command += ["--trusted-proxy", network]
    return command


def child_environment(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The agent's environment without the variables that could hold its secrets."""
    env = os.environ if env is None else env
    return {
        name: value
        for name, value in env.items()
        if not any(part in name.upper() for part in SECRET_NAME_PARTS)
    }


class GatewaySupervisor:
    """Runs the node's gateway as a child process for as long as the agent runs."""

    def __init__(
        self,
        bind: str,
        port: int = 0,
        *,
        command: Sequence[str] | None = None,
        listen_timeout_s: float = LISTEN_TIMEOUT_S,
        restart_first_s: float = RESTART_FIRST_S,
        restart_max_s: float = RESTART_MAX_S,
        events_max: int = EVENTS_MAX,
        stop_grace_s: float = STOP_GRACE_S,
    ) -> None:
        self.bind = bind
        self.command = list(command) if command is not None else gateway_command(bind, port)
        self.listen_timeout_s = listen_timeout_s
        self.restart_first_s = restart_first_s
        self.restart_max_s = restart_max_s
        self.stop_grace_s = stop_grace_s
        # The child, the state and what the child got of it; the writer waits on _wake.
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._process: subprocess.Popen[bytes] | None = None
        self._listening = False  # the current child said where it listens
        self._port: int | None = None
        self._state_line: str | None = None
        self._written: str | None = None  # the line the current child got last
        self._events: deque[GatewayEvent] = deque()
        self._events_max = events_max
        self._events_ready = threading.Condition(threading.Lock())
        self._closing = threading.Event()
        self._first_outcome = threading.Event()
        self.dropped = 0  # events dropped because the queue was full
        self.malformed = 0  # lines from the child that were no event
        self.starts = 0  # children started
        self._supervising = threading.Thread(
            target=self._supervise, name="gateway-supervisor", daemon=True
        )
        self._writing = threading.Thread(
            target=self._write_states, name="gateway-state", daemon=True
        )

    # -- what the agent calls ------------------------------------------------------------

    def start(self) -> int | None:
        """Start the child and wait until it says where it listens (or could not start:
        then it is tried again in the background). The port, or None."""
        self._supervising.start()
        self._writing.start()
        self._first_outcome.wait(self.listen_timeout_s + self.stop_grace_s * 2 + 1)
        return self.port

    @property
    def port(self) -> int | None:
        """Where the gateway listens (or listened last, while it restarts); None before it
        ever said so."""
        with self._lock:
            return self._port

    @property
    def pid(self) -> int | None:
        """The running child's process id (None between children)."""
        with self._lock:
            return self._process.pid if self._process is not None else None

    @property
    def listening(self) -> bool:
        """True while a child runs that said where it listens."""
        with self._lock:
            return self._listening

    def update(self, state: GatewayState) -> None:
        """Have the gateway hold ``state`` from now on: written when it differs from the last
        one, and again to each restarted child. Never blocks on the child."""
        line = state.model_dump_json()
        if (size := len(line.encode())) > STATE_LINE_MAX_BYTES:  # the gateway would drop it
            logger.error(
                "gateway state of %d sessions is %d bytes, over the gateway's %d: not sent",
                len(state.sessions),
                size,
                STATE_LINE_MAX_BYTES,
            )
            return
        with self._wake:
            if line != self._state_line:
                self._state_line = line
                self._wake.notify_all()

    def take(
        self, limit: int = GATEWAY_EVENTS_MAX, timeout_s: float | None = None
    ) -> list[GatewayEvent]:
        """Up to ``limit`` events, oldest first, waiting up to ``timeout_s`` for the first."""
        with self._events_ready:
            if not self._events and timeout_s != 0:
                self._events_ready.wait(timeout_s)
            return [self._events.popleft() for _ in range(min(limit, len(self._events)))]

    def pending(self) -> int:
        """Events waiting to be taken."""
        with self._events_ready:
            return len(self._events)

    def close(self) -> None:
        """End the child (standard input closed, then SIGTERM, then SIGKILL) for good."""
        self._closing.set()
        with self._wake:
            self._wake.notify_all()
            process = self._process
        if self._writing.is_alive():
            # The writer closes the child's input when it sees us closing, unless a write
            # to a child that does not read holds it: then the SIGTERM below frees it.
            self._writing.join(self.stop_grace_s)
        elif process is not None:
            _close_quietly(process.stdin)
        if process is not None:
            _end(process, self.stop_grace_s)
        if self._supervising.is_alive():
            self._supervising.join(self.stop_grace_s * 2 + 1)
        with self._events_ready:
            self._events_ready.notify_all()

    # -- the supervising thread ----------------------------------------------------------

    def _supervise(self) -> None:
        delay = self.restart_first_s
        while not self._closing.is_set():
            began = time.monotonic()
            returncode = self._run_child()
            self._first_outcome.set()
            if self._closing.is_set():
                return
            if time.monotonic() - began >= STABLE_S:
                delay = self.restart_first_s
            logger.warning(
                "gateway process ended (exit status %s); starting it again in %.0f s",
                returncode,
                delay,
            )
            self._closing.wait(delay)
            delay = min(self.restart_max_s, delay * 2)

    def _run_child(self) -> int | None:
        """Run one child until it ends; its exit status (None: it never started)."""
        try:
            process = subprocess.Popen(
                self.command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                env=child_environment(),
                # Its own session: a Ctrl-C at the agent's terminal is for the agent, which
                # then ends the gateway itself.
                start_new_session=True,
            )
        except OSError as error:
            logger.error("cannot start the gateway (%s): %s", " ".join(self.command), error)
            return None
        assert process.stdout is not None
        with self._wake:
            closing = self._closing.is_set()
            if not closing:
                self._process = process
            self._listening = False
            self._written = None
            self.starts += 1
        if closing:  # closed while it started
            _end(process, self.stop_grace_s)
            _close_quietly(process.stdout)
            return process.returncode
        # Not listening in time: end it; the read below then sees the end of its output.
        watchdog = threading.Timer(self.listen_timeout_s, _kill_quietly, (process,))
        watchdog.daemon = True
        watchdog.start()
        try:
            port = self._read_listening(process.stdout)
        finally:
            watchdog.cancel()
        if port is not None:
            with self._wake:
                self._port = port
                self._listening = True
                self._wake.notify_all()  # the writer sends the state to this child
            logger.info("gateway listening on %s port %s (pid %s)", self.bind, port, process.pid)
            self._first_outcome.set()
            self._read_events(process.stdout)
        with self._wake:
            self._listening = False
        _end(process, self.stop_grace_s)
        with self._wake:
            if self._process is process:
                self._process = None
        _close_quietly(process.stdout)
        return process.returncode

    def _read_listening(self, stream: IO[bytes]) -> int | None:
        line = _read_line(stream)
        if line is None:
            logger.error(
                "the gateway said nothing within %.0f s of its start", self.listen_timeout_s
            )
            return None
        try:
            return GatewayListening.model_validate_json(line).listening
        except ValidationError:
            logger.error("the gateway's first line is not where it listens: %.200r", line)
            return None

    def _read_events(self, stream: IO[bytes]) -> None:
        malformed_before = self.malformed
        # What this child opened and has not reported closed: if it dies without saying so
        # (a crash, a kill), the agent says it for it, so that the portal does not count a
        # viewer forever (idle detection) or miss the end of a transfer.
        still_open: dict[str, GatewayEvent] = {}
        while (line := _read_line(stream)) is not None:
            if not line.strip():
                continue
            try:
                event = GatewayEvent.model_validate_json(line)
            except ValidationError as error:
                self.malformed += 1
                if self.malformed == malformed_before + 1:  # once per child, then counted
                    logger.warning(
                        "skipping a line from the gateway that is no event (%s): %.200r",
                        error.errors(include_url=False)[0]["msg"] if error.errors() else error,
                        line,
                    )
                continue
            if event.kind == "opened":
                still_open[event.ticket] = event
            elif event.kind == "closed":
                still_open.pop(event.ticket, None)
            self._queue(event)
        if (skipped := self.malformed - malformed_before) > 1:
            logger.warning("skipped %d lines from the gateway that were no event", skipped)
        if still_open:
            logger.warning("the gateway ended with %d open; closing them", len(still_open))
        ended = datetime.now(UTC)
        for opened in still_open.values():
            self._queue(
                opened.model_copy(
                    update={"kind": "closed", "at": ended, "reason": "the gateway stopped"}
                )
            )

    def _queue(self, event: GatewayEvent) -> None:
        with self._events_ready:
            if len(self._events) >= self._events_max:
                self._events.popleft()
                self.dropped += 1
                if self.dropped == 1 or self.dropped % 1000 == 0:
                    logger.warning(
                        "gateway events queue full (%d): %d oldest event(s) dropped so far",
                        self._events_max,
                        self.dropped,
                    )
            self._events.append(event)
            self._events_ready.notify_all()

    # -- the writing thread --------------------------------------------------------------

    def _write_states(self) -> None:
        while True:
            with self._wake:
                while not self._closing.is_set() and not self._has_news():
                    self._wake.wait()
                process = self._process
                if self._closing.is_set():
                    if process is not None:
                        _close_quietly(process.stdin)
                    return
                line = self._state_line
            assert process is not None and process.stdin is not None and line is not None
            try:
                process.stdin.write(line.encode() + b"\n")
                process.stdin.flush()
            except (OSError, ValueError):
                pass  # the child is ending: its successor gets the state whole
            with self._wake:
                if self._process is process:
                    # Written, or lost with a dying child; either way not again to this one.
                    self._written = line

    def _has_news(self) -> bool:
        """A child that listens has not yet got the latest state (under the lock)."""
        return (
            self._process is not None
            and self._listening
            and self._state_line is not None
            and self._state_line != self._written
        )


def _read_line(stream: IO[bytes]) -> bytes | None:
    """The next line (None at the end): a line over :data:`LINE_MAX` is read to its end and
    given as an empty one."""
    try:
        line = stream.readline(LINE_MAX)
    except (OSError, ValueError):
        return None
    if not line:
        return None
    if len(line) >= LINE_MAX and not line.endswith(b"\n"):
        while (rest := stream.readline(LINE_MAX)) and not rest.endswith(b"\n"):
            pass
        return b"{}"  # no event: counted as malformed
    return line


def _end(process: subprocess.Popen[bytes], grace_s: float) -> None:
    """Wait for the child to exit after its input closed; SIGTERM, then SIGKILL, if not."""
    _close_quietly(process.stdin)
    for sig in (None, signal.SIGTERM, signal.SIGKILL):
        if sig is not None:
            with contextlib.suppress(OSError):
                process.send_signal(sig)
        try:
            process.wait(grace_s)
            return
        except subprocess.TimeoutExpired:
            continue


def _kill_quietly(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(OSError):
        process.kill()


def _close_quietly(stream: IO[bytes] | None) -> None:
    if stream is None:
        return
    with contextlib.suppress(OSError, ValueError):
        stream.close()
